// The LoCoMo benchmark (Maharana et al., ACL 2024; locomo10.json): conversations made of dated
// sessions of turns, and the QA items asked about them.
//
// Known quirks handled here:
//   - Sessions are the `session_<n>` LIST keys, in numeric order (JSON object order is not
//     numeric: "session_10" < "session_2"). conv-26 has more `session_<n>_date_time` keys than
//     sessions; the extra dates are ignored.
//   - `answer` is a string, a number (written as text here) or absent (most category-5 items,
//     which carry `adversarial_answer` instead).
//   - Evidence entries are sometimes malformed ("D8:6; D9:17", "D:11:26", "D"): `evidence` keeps
//     them as given, `evidence_ids` holds the well-formed dia_ids found in them.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "memory/store/fact.h"

namespace inferscale {

struct LocomoTurn {
  std::string speaker;
  std::string dia_id;        // "D<session>:<turn>"
  std::string text;
  std::string blip_caption;  // "" when the turn shares no image
  std::vector<std::string> img_urls;
};

struct LocomoSession {
  int number = 0;          // n of session_<n>
  std::string date_time;   // "1:56 pm on 8 May, 2023"; "" when absent
  std::vector<LocomoTurn> turns;
};

struct LocomoQa {
  std::string question;
  std::string answer;               // "" when absent
  bool has_answer = false;
  std::string adversarial_answer;   // category 5
  std::vector<std::string> evidence;      // as given
  std::vector<std::string> evidence_ids;  // well-formed dia_ids, in order, deduplicated
  // 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial (the official scorer's reading).
  int category = 0;
};

struct LocomoConversation {
  std::string sample_id;  // "conv-26"
  std::string speaker_a;
  std::string speaker_b;
  std::vector<LocomoSession> sessions;  // ascending by number
  std::vector<LocomoQa> qa;
  size_t num_turns() const;
};

// Parses the JSON text of locomo10.json (a list of samples). kInvalidInput naming `origin` and the
// sample on malformed input.
std::vector<LocomoConversation> parse_locomo(std::string_view json_text, std::string_view origin = "locomo");
// Reads and parses a file (kNotFound when it cannot be read).
std::vector<LocomoConversation> load_locomo(const std::string& path);

// The conversation's turns as facts to store with FactStore::add_turns, in order: text, the
// session's date, source session "session_<n>", turn dia_id and speaker; a shared image's
// blip_caption and img_url go into metadata. Empty turns are left out (`skipped` counts them).
std::vector<NewFact> locomo_turns(const LocomoConversation& c, size_t* skipped = nullptr);

// The well-formed dia_ids ("D<n>:<m>") in one evidence entry; "D:11:26" reads as "D11:26".
std::vector<std::string> locomo_evidence_ids(std::string_view entry);

}  // namespace inferscale
