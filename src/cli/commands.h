// Each CLI subcommand lives in its own file (cli/cmd_*.cpp) and registers itself on the root app.
// Add a declaration here and one line in main.cpp per subcommand.
#pragma once
#include <CLI/CLI.hpp>

namespace inferscale::cli {

// `memory add|import|import-locomo|search|list|delete|users` (cmd_memory.cpp).
void register_generate(CLI::App& app);
void register_info(CLI::App& app);
void register_memory(CLI::App& app);
void register_chat(CLI::App& app);

// `serve`: the OpenAI-compatible HTTP server (cmd_serve.cpp).
void register_serve(CLI::App& app);

}  // namespace inferscale::cli
