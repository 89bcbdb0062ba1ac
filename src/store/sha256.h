// SHA-256 of byte ranges (OpenSSL's libcrypto, which uses the CPU's SHA extensions where present:
// ~1.7 GB/s a core on this project's machines), and its hex form.
// Thread-safety: pure functions; call from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace uma::store {

using Digest = std::array<std::uint8_t, 32>;

Digest sha256(std::span<const std::uint8_t> bytes);
std::string to_hex(const Digest& d);
// False unless `hex` is exactly 64 hex digits.
bool from_hex(std::string_view hex, Digest* out);

// Incremental form, for data that arrives in pieces (metadata fields, a file read in blocks).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const std::uint8_t> bytes);
  void update(std::string_view text) {
    update({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
  }
  Digest finish();

 private:
  void* ctx_;  // EVP_MD_CTX
};

}  // namespace uma::store
