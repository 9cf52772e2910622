// Memory imports: LoCoMo-style conversation files and JSON / JSONL fact records.
#include "fuzz_input.h"
#include "memory/formats/fact_json.h"
#include "memory/formats/locomo.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = fuzz::text(data, size);
  fuzz::expect_clear_error([&] {
    for (const LocomoConversation& c : parse_locomo(in, "fuzz")) {
      locomo_turns(c);
      for (const auto& q : c.qa)
        for (const std::string& e : q.evidence) locomo_evidence_ids(e);
    }
  });
  fuzz::expect_clear_error([&] { parse_fact_records(in, "fuzz"); });
  return 0;
}
