// EnumName tables: a mode's words, as a flag or a file gives them, parsed once at the edge into its
// enum and named again for logs and --print-config. One table per enum, beside the enum.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace uma {

template <class E>
struct EnumName {
  std::string_view name;
  E value;
};

// False, and *out untouched, for a word the table does not have.
template <class E, std::size_t N>
constexpr bool parse_enum(const EnumName<E> (&names)[N], std::string_view word, E* out) {
  for (const EnumName<E>& n : names) {
    if (n.name == word) {
      *out = n.value;
      return true;
    }
  }
  return false;
}

// The value's first word in the table ("" for a value it lacks).
template <class E, std::size_t N>
constexpr std::string_view enum_name(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return {};
}

// Every word, in table order (a flag's allowed values).
template <class E, std::size_t N>
std::vector<std::string> enum_words(const EnumName<E> (&names)[N]) {
  std::vector<std::string> words;
  for (const EnumName<E>& n : names) words.emplace_back(n.name);
  return words;
}

}  // namespace uma
