// The LoCoMo parser: a small fixture with every known quirk, malformed input, and (when the
// shared data is present) the published counts of locomo10.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "memory/formats/locomo.h"
#include "memory/store/timestamp.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::expect_error;

namespace {
const std::string kFixture = std::string(INFERSCALE_FIXTURES) + "/locomo_mini.json";
const std::string kLocomo = std::string(INFERSCALE_SHARED_DATA) + "/locomo/locomo10.json";
}  // namespace

TEST(Locomo, EvidenceIds) {
  EXPECT_EQ(locomo_evidence_ids("D1:3"), (std::vector<std::string>{"D1:3"}));
  EXPECT_EQ(locomo_evidence_ids("D8:6; D9:17"), (std::vector<std::string>{"D8:6", "D9:17"}));
  EXPECT_EQ(locomo_evidence_ids("D22:1 D22:2 D9:10"), (std::vector<std::string>{"D22:1", "D22:2", "D9:10"}));
  EXPECT_EQ(locomo_evidence_ids("D:11:26"), (std::vector<std::string>{"D11:26"}));
  EXPECT_TRUE(locomo_evidence_ids("D").empty());
  EXPECT_TRUE(locomo_evidence_ids("D1:").empty());
  EXPECT_TRUE(locomo_evidence_ids("XD1:2").empty());
}

TEST(Locomo, FixtureWithQuirks) {
  const auto convs = load_locomo(kFixture);
  ASSERT_EQ(convs.size(), 2u);
  const LocomoConversation& c = convs[0];
  EXPECT_EQ(c.sample_id, "mini-1");
  EXPECT_EQ(c.speaker_a, "Ada");
  EXPECT_EQ(c.speaker_b, "Bo");
  // Sessions are the list keys in numeric order; dates without a session are ignored.
  ASSERT_EQ(c.sessions.size(), 3u);
  EXPECT_EQ(c.sessions[0].number, 1);
  EXPECT_EQ(c.sessions[1].number, 2);
  EXPECT_EQ(c.sessions[2].number, 10);
  EXPECT_EQ(c.sessions[2].date_time, "6:40 pm on 1 June, 2022");
  EXPECT_EQ(c.num_turns(), 6u);
  const LocomoTurn& bike = c.sessions[0].turns[1];
  EXPECT_EQ(bike.speaker, "Bo");
  EXPECT_EQ(bike.dia_id, "D1:2");
  EXPECT_EQ(bike.text, "Nice! Here is my new bike.");
  EXPECT_EQ(bike.blip_caption, "a photo of a red bicycle");
  EXPECT_EQ(bike.img_urls, std::vector<std::string>{"https://example.invalid/bike.jpg"});
  EXPECT_EQ(c.sessions[1].turns[0].blip_caption, "a photo of a music stand");
  EXPECT_TRUE(c.sessions[1].turns[0].img_urls.empty());
  EXPECT_TRUE(c.sessions[0].turns[0].blip_caption.empty());

  ASSERT_EQ(c.qa.size(), 4u);
  EXPECT_EQ(c.qa[0].answer, "cello");
  EXPECT_TRUE(c.qa[0].has_answer);
  EXPECT_EQ(c.qa[0].category, 4);
  EXPECT_EQ(c.qa[1].answer, "2022");  // a number in the file
  EXPECT_EQ(c.qa[1].evidence, (std::vector<std::string>{"D1:1; D2:1", "D"}));
  EXPECT_EQ(c.qa[1].evidence_ids, (std::vector<std::string>{"D1:1", "D2:1"}));
  EXPECT_EQ(c.qa[2].evidence_ids, std::vector<std::string>{"D10:2"});  // deduplicated
  EXPECT_FALSE(c.qa[3].has_answer);
  EXPECT_EQ(c.qa[3].answer, "");
  EXPECT_EQ(c.qa[3].adversarial_answer, "red");
  EXPECT_EQ(c.qa[3].category, 5);

  EXPECT_EQ(convs[1].sample_id, "mini-2");
  EXPECT_EQ(convs[1].sessions.at(0).turns.at(0).text, "Caf\xc3\xa9 tonight?");
  EXPECT_TRUE(convs[1].qa.empty());
}

TEST(Locomo, MalformedInputIsANamedError) {
  expect_error([] { parse_locomo("{not json", "x.json"); }, ErrorKind::kInvalidInput, "x.json: not valid JSON");
  expect_error([] { parse_locomo("{}", "x.json"); }, ErrorKind::kInvalidInput, "expected a list");
  // Nesting is bounded before parsing (kMaxImportJsonDepth).
  expect_error([] { parse_locomo(std::string(100000, '[') + std::string(100000, ']'), "x.json"); }, ErrorKind::kInvalidInput,
               "x.json: nests arrays and objects more than 64 deep");
  expect_error([] { parse_locomo(R"([{"conversation": {}}])", "x.json"); }, ErrorKind::kInvalidInput, "sample 0 has no sample_id");
  expect_error([] { parse_locomo(R"([{"sample_id": "s"}])", "x.json"); }, ErrorKind::kInvalidInput, "s has no conversation");
  expect_error([] { parse_locomo(R"([{"sample_id": "s", "conversation": {"session_1": [{"text": "hi"}]}}])", "x.json"); },
               ErrorKind::kInvalidInput, "session_1: a turn has no dia_id");
  expect_error([] { parse_locomo(R"([{"sample_id": "s", "conversation": {}, "qa": [{"question": "q?"}]}])", "x.json"); },
               ErrorKind::kInvalidInput, "no integer category");
  expect_error([] { load_locomo("/nonexistent/locomo.json"); }, ErrorKind::kNotFound, "/nonexistent/locomo.json");
}

TEST(Locomo, Locomo10Counts) {
  if (!std::filesystem::exists(kLocomo)) GTEST_SKIP() << "LoCoMo data not found at " << kLocomo;
  const auto convs = load_locomo(kLocomo);
  ASSERT_EQ(convs.size(), 10u);
  size_t turns = 0, qa = 0, sessions = 0, captions = 0, images = 0, answered = 0;
  std::map<int, size_t> categories;
  std::map<std::string, std::pair<size_t, size_t>> per_conv;  // sessions, turns
  size_t evidence_total = 0, evidence_found = 0;
  for (const auto& c : convs) {
    std::set<std::string> dia_ids;
    for (const auto& s : c.sessions) {
      EXPECT_TRUE(parse_timestamp(s.date_time).has_value()) << c.sample_id << " session " << s.number << ": " << s.date_time;
      for (const auto& t : s.turns) {
        dia_ids.insert(t.dia_id);
        captions += t.blip_caption.empty() ? 0 : 1;
        images += t.img_urls.empty() ? 0 : 1;
      }
    }
    for (size_t i = 1; i < c.sessions.size(); ++i) EXPECT_LT(c.sessions[i - 1].number, c.sessions[i].number);
    per_conv[c.sample_id] = {c.sessions.size(), c.num_turns()};
    turns += c.num_turns();
    sessions += c.sessions.size();
    qa += c.qa.size();
    for (const auto& q : c.qa) {
      ++categories[q.category];
      answered += q.has_answer ? 1 : 0;
      for (const auto& id : q.evidence_ids) {
        ++evidence_total;
        evidence_found += dia_ids.count(id);
      }
    }
  }
  EXPECT_EQ(turns, 5882u);
  EXPECT_EQ(qa, 1986u);
  EXPECT_EQ(sessions, 272u);
  EXPECT_EQ(captions, 1226u);
  EXPECT_EQ(images, 910u);
  EXPECT_EQ(answered, 1542u);  // 1,540 of categories 1-4 plus 2 category-5 items with an answer
  EXPECT_EQ(categories, (std::map<int, size_t>{{1, 282}, {2, 321}, {3, 96}, {4, 841}, {5, 446}}));
  EXPECT_EQ(per_conv["conv-26"], (std::pair<size_t, size_t>{19, 419}));  // 35 date keys, 19 sessions
  EXPECT_EQ(per_conv["conv-41"], (std::pair<size_t, size_t>{32, 663}));
  EXPECT_EQ(per_conv["conv-50"], (std::pair<size_t, size_t>{30, 568}));
  EXPECT_EQ(convs[0].sessions[0].date_time, "1:56 pm on 8 May, 2023");
  // Nearly all evidence points at a real turn (a few dia_ids in the file are wrong).
  EXPECT_GT(evidence_found, evidence_total * 99 / 100) << evidence_found << " of " << evidence_total;
}
