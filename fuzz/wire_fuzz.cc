// libFuzzer target: the frame decoder and the JSON request parser, the two places where untrusted
// bytes from any local client enter umad.
//
// The first input byte picks how the rest is split into reads (1..256 bytes each), so partial
// headers, frames split across reads and several frames per read are all explored. Every frame is
// parsed; a request that parses must survive encode -> parse unchanged (the client library and the
// server agree), and nothing may crash, leak or trip a sanitizer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ipc/frame_codec.h"
#include "ipc/json_messages.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t step = std::size_t(data[0]) + 1;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  uma::FrameDecoder decoder(4096);
  const uma::RequestLimits limits{1024};
  while (true) {
    const std::size_t n = rest.size() < step ? rest.size() : step;
    decoder.feed(rest.substr(0, n));
    rest.remove_prefix(n);
    while (auto frame = decoder.next()) {
      if (frame->error != uma::ErrorCode::kOk) return 0;  // refused stream: the server closes it
      uma::ClientMessage msg;
      std::string id;
      if (!uma::parse_client_message(frame->payload, limits, &msg, &id).ok()) continue;
      if (auto* req = std::get_if<uma::WireRequest>(&msg)) {
        uma::ClientMessage again;
        std::string id2;
        if (!uma::parse_client_message(uma::encode_request(*req), limits, &again, &id2).ok()) std::abort();
        const auto& r2 = std::get<uma::WireRequest>(again);
        if (r2.prompt != req->prompt || r2.stop != req->stop || r2.max_tokens != req->max_tokens || id2 != id) std::abort();
      }
    }
    if (rest.empty()) break;
  }
  return 0;
}
