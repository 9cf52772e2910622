// Running the built `inferscale` CLI from tests as real child processes: one-shot commands
// (run_cli: exit code, stdout, stderr) and long-running ones such as `serve` (ChildProcess: wait
// for a line on stderr, signal it, time its exit). Output goes to files in a test directory.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace inferscale::test_support {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A child running `inferscale <args...>` with stdout and stderr in DIR/NAME.out and DIR/NAME.err.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> args, const std::filesystem::path& dir, const std::string& name)
      : out_(dir / (name + ".out")), err_(dir / (name + ".err")) {
    args.insert(args.begin(), INFERSCALE_CLI);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(127);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~ChildProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait(10);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return !code_.has_value(); }
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }

  // The exit code (128 + signal when killed) once it exits within `seconds`, else nullopt.
  std::optional<int> wait(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!code_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= end) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return code_;
  }

  // Waits until stderr matches `re` (returns the first capture group, or the whole match), or
  // throws when the process exits first or `seconds` pass.
  std::string wait_for_stderr(const std::regex& re, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      const std::string e = err();
      std::smatch m;
      if (std::regex_search(e, m, re)) return m.size() > 1 ? m[1].str() : m[0].str();
      if (wait(0)) throw std::runtime_error("the process exited (" + std::to_string(*code_) + ") first: " + e);
      if (std::chrono::steady_clock::now() >= end) throw std::runtime_error("timed out waiting; stderr: " + e);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void signal(int sig) const { ::kill(pid_, sig); }

 private:
  std::filesystem::path out_, err_;
  pid_t pid_ = -1;
  std::optional<int> code_;
};

struct CliResult {
  int code = -1;  // exit code; 128 + signal when killed
  std::string out, err;
};

// Runs `inferscale <args...>` to its end (at most `seconds`, then it is killed).
inline CliResult run_cli(const std::vector<std::string>& args, const std::filesystem::path& dir, double seconds = 600) {
  ChildProcess p(args, dir, "cli");
  CliResult r;
  const auto code = p.wait(seconds);
  r.code = code ? *code : -1;
  r.out = p.out();
  r.err = p.err();
  return r;
}

// `inferscale serve --model demo --host 127.0.0.1 --port 0 <args...>`, ready once it logged the
// port it listens on.
class ServeProcess : public ChildProcess {
 public:
  ServeProcess(const std::vector<std::string>& args, const std::filesystem::path& dir, const std::string& name = "serve")
      : ChildProcess(serve_args(args), dir, name) {
    port_ = std::stoi(wait_for_stderr(std::regex(R"(serving '[^']*' at http://127\.0\.0\.1:(\d+)/v1)"), 120));
  }
  int port() const { return port_; }

 private:
  static std::vector<std::string> serve_args(const std::vector<std::string>& args) {
    std::vector<std::string> a{"serve", "--model", "demo", "--host", "127.0.0.1", "--port", "0"};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }
  int port_ = 0;
};

}  // namespace inferscale::test_support
