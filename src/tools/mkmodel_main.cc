// uma-mkmodel: writes seeded random-weight llama GGUF models for tests, demos and benchmarks.
#include <CLI/CLI.hpp>
#include <llama.h>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tools/mkmodel.h"

#ifndef UMA_VOCAB_GGUF
#define UMA_VOCAB_GGUF ""
#endif

int main(int argc, char** argv) {
  CLI::App app{"uma-mkmodel: write a llama-architecture GGUF with seeded random weights and a real tokenizer"};
  std::string preset = "tiny";
  uma::MkModelOptions o;
  o.vocab_path = UMA_VOCAB_GGUF;
  app.add_option("-p,--preset", preset, "tiny | small | 1b | 8b | oracle")->capture_default_str()
      ->check(CLI::IsMember({"tiny", "small", "1b", "8b", "oracle"}));
  app.add_option("-t,--type", o.type, "f32 | f16 | q8_0 | q4_0")->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0"}));
  app.add_option("-s,--seed", o.seed, "weights seed")->capture_default_str();
  app.add_option("-o,--out", o.out_path, "output .gguf path (without it, --mmproj writes the projector alone)");
  app.add_option("--vocab", o.vocab_path, "vocab-only GGUF to take the tokenizer from")->capture_default_str()
      ->check(CLI::ExistingFile);
  app.add_option("--threads", o.threads, "quantization threads (0: all)")->capture_default_str();
  std::string template_file;
  app.add_option("--chat-template-file", template_file, "a chat template (a model family's Jinja text) to store as "
                 "tokenizer.chat_template")->check(CLI::ExistingFile);
  app.add_option("--context-length", o.context_length, "the trained context the model says (llama.context_length)")
      ->capture_default_str()->check(CLI::Range(256, 1 << 20));
  app.add_flag("--no-bos", o.no_bos, "tokenize without a BOS (tokenizer.ggml.add_bos_token = false)");
  app.add_flag("--rerank", o.rerank, "a reranking model (Qwen3's architecture, a classifier head, rank pooling): /rerank");
  app.add_option("--fim-tokens", o.fim_tokens, "fill-in-the-middle token ids: PRE,SUF,MID[,REP,SEP] (for /infill)")
      ->delimiter(',')->expected(3, 5)->check(CLI::NonNegativeNumber);
  std::vector<std::string> token_texts;
  app.add_option("--token-text", token_texts, "ID=TEXT: token ID's text becomes TEXT (\\n: a newline), a user-defined "
                 "token; repeatable (an oracle whose reply is chosen: a tool call)");
  bool oracle = false;
  app.add_option("--agree", o.agree, "oracle: the share of tokens after which the model predicts last + 1 as the "
                 "oracle does (a draft for an oracle target; deterministic per token)")->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--oracle", oracle, "the preset's shape built as the oracle (greedy next token = last + 1) at that "
               "shape's real cost");
  std::string mmproj;
  std::string projector_shape = "tiny";
  app.add_option("--mmproj", mmproj, "also write a vision projector for the model (a LLaVA MLP over a ViT, as "
                 "llama.cpp's libmtmd reads) to this path: umad --mmproj");
  app.add_option("--mmproj-shape", projector_shape, "the projector's ViT: tiny (64 px, 16 embeddings an image), vit-b "
                 "(224 px, 196), clip-l (LLaVA-1.5's: 336 px, 576)")->capture_default_str()
      ->check(CLI::IsMember({"tiny", "vit-b", "clip-l"}));
  CLI11_PARSE(app, argc, argv);
  for (const std::string& t : token_texts) {
    const std::size_t eq = t.find('=');
    std::int32_t id = -1;
    if (eq == std::string::npos || std::from_chars(t.data(), t.data() + eq, id).ptr != t.data() + eq || id < 0) {
      std::fprintf(stderr, "uma-mkmodel: --token-text wants ID=TEXT, not '%s'\n", t.c_str());
      return 2;
    }
    std::string text = t.substr(eq + 1);
    for (std::size_t at = text.find("\\n"); at != std::string::npos; at = text.find("\\n", at + 1)) text.replace(at, 2, "\n");
    o.token_texts[id] = text;
  }
  if (!template_file.empty()) {
    std::ifstream f(template_file);
    std::stringstream text;
    text << f.rdbuf();
    o.chat_template = text.str();
  }

  uma::find_preset(preset, &o.shape);
  if (oracle) o.shape.oracle = true;
  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
  }, nullptr);
  llama_backend_init();
  if (o.out_path.empty() && mmproj.empty()) {
    std::fprintf(stderr, "uma-mkmodel: --out is required (or --mmproj alone)\n");
    return 2;
  }
  uma::Status st = o.out_path.empty() ? uma::Status::Ok() : uma::write_model(o);
  uma::ProjectorShape projector;
  uma::find_projector_preset(projector_shape, o.shape.n_embd, &projector);
  if (st.ok() && !mmproj.empty()) st = uma::write_projector(projector, o.shape.n_embd, o.seed, mmproj);
  llama_backend_free();
  if (!st.ok()) {
    std::fprintf(stderr, "uma-mkmodel: %s\n", st.to_string().c_str());
    return 1;
  }
  if (!o.out_path.empty()) std::printf("%s\n", o.out_path.c_str());
  if (!mmproj.empty()) std::printf("%s\n", mmproj.c_str());
  return 0;
}
