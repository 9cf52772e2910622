// JSON forms of facts, shared by the CLI (memory import / search --json) and the HTTP API.
//
// A fact record (input) is an object:
//   {"text": "...",                      required, non-empty
//    "speaker": "...", "date": "...",    optional; a date must be one parse_timestamp() reads
//    "source": "..." | {"conversation", "session", "turn", "speaker"},   optional; a string is the conversation
//    "metadata": {...},                  optional, a JSON object (or null), stored as JSON text
//    "vector": [floats]}                 optional client vector
// Unknown keys are rejected (they are usually typos).
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "memory/store/fact.h"

namespace inferscale {

// One record; `where` names it in errors ("facts.jsonl line 3").
NewFact fact_record_from_json(const nlohmann::json& record, std::string_view where);
// A JSON array of numbers as floats (a fact's or a query's vector; may be empty). kInvalidInput
// naming `what` when it is not an array or an element is not a finite number a float can hold.
std::vector<float> floats_from_json(const nlohmann::json& value, std::string_view what);
// A JSON array of records, or JSON Lines (one record per non-blank line). kInvalidInput naming
// `origin` and the entry on any problem.
std::vector<NewFact> parse_fact_records(std::string_view text, std::string_view origin);

// {"conversation", "session", "turn", "speaker"}, every key present (null when empty). Outputs keep
// their keys in the order written (ordered_json), so printed JSON reads naturally.
nlohmann::ordered_json source_to_json(const FactSource& source);
// A fact as the CLI prints it and the HTTP API returns it, every key always present (null when
// unknown): {"id", "text", "speaker", "date", "date_epoch", "source", "turn_index", "metadata"
// (parsed JSON), "version", "created_at", "updated_at" (unix seconds)}.
nlohmann::ordered_json fact_to_json(const Fact& fact);

}  // namespace inferscale
