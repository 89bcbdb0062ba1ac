// The bridge to llama.cpp's `common` chat code. Only this file sees its headers (and its vendored
// JSON library); everything crosses as strings and our own structs.
#include "chat/chat_templates.h"

#include <exception>

#include "chat.h"
#include "llama.h"

namespace uma {

namespace {

// llama.cpp's built-in template names (llama_chat_apply_template's fixed formats).
bool is_builtin_name(const std::string& s) {
  std::vector<const char*> names(static_cast<std::size_t>(llama_chat_builtin_templates(nullptr, 0)));
  llama_chat_builtin_templates(names.data(), names.size());
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

}  // namespace

struct ChatTemplates::Impl {
  common_chat_templates_ptr templates;
  bool jinja = true;  // false: a built-in name, rendered by llama_chat_apply_template
};

ChatTemplates::ChatTemplates(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplates::~ChatTemplates() = default;

std::unique_ptr<ChatTemplates> ChatTemplates::load(const llama_model* model, const std::string& override_template,
                                                   Status* st) {
  if (override_template.empty() && (model == nullptr || llama_model_chat_template(model, nullptr) == nullptr)) {
    *st = Status(ErrorCode::kBadRequest, "the model has no chat template; start umad with --chat-template "
                                         "(a Jinja template or a llama.cpp name such as chatml)");
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->jinja = !is_builtin_name(override_template);
  try {
    impl->templates = common_chat_templates_init(model, override_template);
  } catch (const std::exception& e) {
    *st = Status(ErrorCode::kInvalidArgument, std::string("the chat template does not parse: ") + e.what());
    return nullptr;
  }
  *st = Status::Ok();
  return std::unique_ptr<ChatTemplates>(new ChatTemplates(std::move(impl)));
}

std::unique_ptr<ChatTemplates> ChatTemplates::from_text(const std::string& source, const std::string& bos,
                                                        const std::string& eos, Status* st) {
  auto impl = std::make_unique<Impl>();
  impl->jinja = !is_builtin_name(source);
  try {
    impl->templates = common_chat_templates_init(nullptr, source, bos, eos);
  } catch (const std::exception& e) {
    *st = Status(ErrorCode::kInvalidArgument, std::string("the chat template does not parse: ") + e.what());
    return nullptr;
  }
  *st = Status::Ok();
  return std::unique_ptr<ChatTemplates>(new ChatTemplates(std::move(impl)));
}

Status ChatTemplates::render(const std::vector<ChatTurn>& turns, std::string* prompt) const {
  common_chat_templates_inputs in;
  in.messages.reserve(turns.size());
  for (const ChatTurn& t : turns) {
    common_chat_msg m;
    m.role = t.role;
    m.content = t.content;
    in.messages.push_back(std::move(m));
  }
  in.add_generation_prompt = true;
  in.use_jinja = impl_->jinja;
  try {
    *prompt = common_chat_templates_apply(impl_->templates.get(), in).prompt;
  } catch (const std::exception& e) {
    return Status(ErrorCode::kBadRequest, std::string("the chat template refused the messages: ") + e.what(),
                  "messages");
  }
  return Status::Ok();
}

std::string ChatTemplates::source() const { return common_chat_templates_source(impl_->templates.get()); }

}  // namespace uma
