// inferscale: the command-line entry point. Subcommands register themselves (cli/commands.h);
// errors become one line on stderr naming the problem and a non-zero exit code, never a crash.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "cli/rank_processes.h"
#include "util/check.h"

int main(int argc, char** argv) {
  CLI::App app{"InferScale: LLM serving with precomputed per-user memory KV"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "inferscale 0.1.0");
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(spdlog::stderr_color_mt("inferscale"));
  inferscale::cli::register_generate(app);
  inferscale::cli::register_info(app);
  inferscale::cli::register_memory(app);
  inferscale::cli::register_chat(app);
  inferscale::cli::register_serve(app);
  inferscale::cli::register_rank_worker(app);
  inferscale::cli::set_command_line(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const inferscale::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.kind() == inferscale::ErrorKind::kInternal ? 70 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 70;
  }
  return 0;
}
