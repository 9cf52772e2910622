// Minimal edits of a serialized SentencePiece ModelProto at the protobuf wire level (Debian's
// libsentencepiece ships no ModelProto header). Field numbers from sentencepiece_model.proto:
// ModelProto.normalizer_spec = 3, NormalizerSpec.add_dummy_prefix = 3 (bool, default true).
#pragma once
#include <string>
#include <string_view>

namespace inferscale {

// `proto` with normalizer_spec.add_dummy_prefix set to `value`; `previous` receives the old value.
// Throws kInvalidInput (naming `source`) when the bytes are not a well-formed message.
std::string spm_set_add_dummy_prefix(std::string_view proto, bool value, bool& previous, const std::string& source);

}  // namespace inferscale
