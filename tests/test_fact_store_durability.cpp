// Nothing acknowledged is lost: a child process adds facts and acknowledges each one after the
// call returns; the parent kills it with SIGKILL at an arbitrary point (likely mid-transaction),
// reopens the store and must find every acknowledged fact, intact. Repeated, so recovery of a
// killed writer's WAL (SQLite) or of its open transaction (PostgreSQL) is exercised again and
// again. Both engines (store_backends.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "memory/store/fact_store.h"
#include "store_backends.h"
#include "test_fact_store_util.h"

using namespace inferscale;

class FactStoreDurability : public inferscale::testing::StoreTest {};
INSTANTIATE_STORE_TESTS(FactStoreDurability);

namespace {

// Child: calls write(store, i) for i = 0, 1, 2, ... and writes what it returns (ack lines) to
// `ack_fd` once the write returned. Never returns.
template <class Write>
[[noreturn]] void write_forever(const std::string& where, int ack_fd, Write write) {
  try {
    auto store = FactStore::open_at(where);
    for (int i = 0;; ++i) {
      const std::string ack = write(*store, i);
      if (::write(ack_fd, ack.data(), ack.size()) != static_cast<ssize_t>(ack.size())) ::_exit(3);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    ::_exit(2);
  }
}

// Forks a child that runs child(ack_fd), which never returns: its pid and the read end of its acks.
struct Child {
  pid_t pid = -1;
  FILE* acks = nullptr;
};
template <class F>
Child spawn(F child) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    child(fds[1]);
  }
  ::close(fds[1]);
  return Child{pid, ::fdopen(fds[0], "r")};
}

// One ack line "<id> <text>\n" per fact whose add returned.
[[noreturn]] void child_writer(const std::string& where, int ack_fd, int round) {
  write_forever(where, ack_fd, [round](FactStore& store, int i) {
    std::vector<NewFact> batch(static_cast<size_t>(1 + i % 3));  // singles and small batches
    for (size_t j = 0; j < batch.size(); ++j) {
      batch[j].text = "round " + std::to_string(round) + " fact " + std::to_string(i) + "." + std::to_string(j);
      if (j == 1) batch[j].vector = {static_cast<float>(i), 1.0f};
    }
    const std::vector<int64_t> ids =
        i % 5 == 4 ? store.add_turns("default", "u", "c", batch) : store.add_facts("default", "u", batch);
    std::string ack;
    for (size_t j = 0; j < ids.size(); ++j) ack += std::to_string(ids[j]) + " " + batch[j].text + "\n";
    return ack;
  });
}

}  // namespace

TEST_P(FactStoreDurability, AcknowledgedFactsSurviveSigkill) {
  const std::string at = where->where();
  std::map<int64_t, std::string> acked;
  for (int round = 0; round < 4; ++round) {
    const auto [pid, in] = spawn([&](int fd) { child_writer(at, fd, round); });
    ASSERT_NE(in, nullptr);
    // Let the child get some way in (a different distance each round), then kill it.
    const size_t target = acked.size() + 20 + 37 * static_cast<size_t>(round);
    char line[512];
    size_t got = 0;
    while (acked.size() < target && std::fgets(line, sizeof line, in) != nullptr) {
      char* space = std::strchr(line, ' ');
      ASSERT_NE(space, nullptr);
      *space = '\0';
      std::string text(space + 1);
      text.pop_back();  // '\n'
      acked[std::stoll(line)] = text;
      ++got;
    }
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with status " << WEXITSTATUS(status);
    // Acks written before the kill count too: read to EOF (complete lines only).
    while (std::fgets(line, sizeof line, in) != nullptr) {
      const size_t n = std::strlen(line);
      if (n == 0 || line[n - 1] != '\n') break;
      char* space = std::strchr(line, ' ');
      *space = '\0';
      std::string text(space + 1);
      text.pop_back();
      acked[std::stoll(line)] = text;
    }
    std::fclose(in);
    EXPECT_GT(got, 0u);

    auto store = open_store(FactStoreOptions{false});
    for (const auto& [id, text] : acked) {
      const Fact f = store->get("default", "u", id);
      EXPECT_EQ(f.text, text) << "fact " << id;
    }
    // Batches are atomic: every stored fact was either acknowledged or part of the one batch in
    // flight at a kill (at most 3 facts per round).
    EXPECT_LE(store->count("default", "u"), acked.size() + 3 * static_cast<size_t>(round + 1));
    EXPECT_GE(store->count("default", "u"), acked.size());
  }
}

namespace {

std::vector<NewFact> keyed_batch(int round, int i) {
  std::vector<NewFact> batch(static_cast<size_t>(1 + i % 3));
  for (size_t j = 0; j < batch.size(); ++j)
    batch[j].text = "keyed round " + std::to_string(round) + " write " + std::to_string(i) + "." + std::to_string(j);
  return batch;
}

Idempotency key_of(int round, int i) {
  Idempotency idem;
  idem.key = "r" + std::to_string(round) + "-" + std::to_string(i);
  idem.request_hash = keyed_batch(round, i)[0].text;  // one request per key
  idem.render = [](const WriteResult& r) {
    std::string s;
    for (int64_t id : r.ids) s += std::to_string(id) + ",";
    return s;
  };
  return idem;
}

// Child: writes batch 0, 1, 2, ... each under its own idempotency key, acking "<i>\n" once the
// write returned. Never returns.
[[noreturn]] void keyed_writer(const std::string& where, int ack_fd, int round) {
  write_forever(where, ack_fd, [round](FactStore& store, int i) {
    Idempotency idem = key_of(round, i);
    store.add_facts("default", "k", keyed_batch(round, i), &idem);
    return std::to_string(i) + "\n";
  });
}

}  // namespace

// Issue 11, defect 8: after a kill -9 one write may be committed but never acknowledged. A client
// that retries every write it has no answer for, under the same idempotency keys, ends with each
// write stored exactly once: the key was committed in the same transaction as the facts.
TEST_P(FactStoreDurability, RetriesUnderIdempotencyKeysAfterSigkillWriteEachFactOnce) {
  const std::string at = where->where();
  size_t expected = 0;
  for (int round = 0; round < 3; ++round) {
    const auto [pid, in] = spawn([&](int fd) { keyed_writer(at, fd, round); });
    ASSERT_NE(in, nullptr);
    int last = -1;
    char line[64];
    while (last < 15 + 11 * round && std::fgets(line, sizeof line, in) != nullptr) last = std::atoi(line);
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    while (std::fgets(line, sizeof line, in) != nullptr)
      if (std::strchr(line, '\n') != nullptr) last = std::atoi(line);
    std::fclose(in);
    // The client retries what it sent without an answer (the write after `last`) and, to be sure,
    // everything it sent: acknowledged writes are answered from their keys.
    auto store = open_store(FactStoreOptions{false});
    size_t replayed = 0;
    for (int i = 0; i <= last + 1; ++i) {
      Idempotency idem = key_of(round, i);
      store->add_facts("default", "k", keyed_batch(round, i), &idem);
      replayed += idem.replayed ? 1 : 0;
      expected += keyed_batch(round, i).size();
    }
    EXPECT_GE(replayed, static_cast<size_t>(last + 1));
    EXPECT_EQ(store->count("default", "k"), expected) << "round " << round;
  }
}
