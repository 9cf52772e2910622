# The default server's model, sampling and retrieval: what scripts/run.sh serves, and what the
# tests of the README's demo and examples start (scripts/demo_test.sh, scripts/docs_examples_test.sh).
# Sourced with ROOT (the repository) set and the user's `serve` arguments in "$@"; sets the array
# DEFAULT_SERVE to the arguments that go before them, and DEFAULT_MODEL to what it picked:
#   - the model: SmolLM2-135M-Instruct (models/, fetched by scripts/fetch_models.sh) with its model
#     card's sampling (configs/SmolLM2-135M-Instruct/generation_config.json), else the built-in demo
#     model (random weights: its text is meaningless); none when "$@" names a model;
#   - retrieval: hybrid (BM25 + all-MiniLM-L6-v2 by reciprocal rank fusion) when setup fetched the
#     sentence encoder; none when "$@" names an embedder or a retrieval mode.
DEFAULT_SERVE=()
DEFAULT_MODEL=""
case " $* " in
  *" --model "*|*" --model="*|*" -m "*) ;;
  *)
    if [ -f "$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
      DEFAULT_MODEL=smollm2
      DEFAULT_SERVE+=(--model "$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
                      --generation-config "$ROOT/configs/SmolLM2-135M-Instruct")
    else
      DEFAULT_MODEL=demo
      DEFAULT_SERVE+=(--model demo)
    fi
    ;;
esac
case " $* " in
  *" --embedder "*|*" --embedder="*|*" --retrieval "*|*" --retrieval="*) ;;
  *)
    if [ -f "$ROOT/models/all-MiniLM-L6-v2/model.safetensors" ]; then
      DEFAULT_SERVE+=(--embedder "$ROOT/models/all-MiniLM-L6-v2")
    fi
    ;;
esac
