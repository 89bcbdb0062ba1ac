// StateTable: a state machine's states by name and its legal transitions, declared once beside its
// enum; move_state() is the one checked setter every machine here goes through. An illegal
// transition is a bug, never input: it is said on stderr in one format,
//   <machine> <who>: illegal transition <from> -> <to>
// and the process aborts in every build (a machine that goes on from a state it cannot be in
// corrupts what it owns).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "common/enum_names.h"

namespace uma {

template <class E, std::size_t N>
class StateTable {
  static_assert(N <= 32, "a state is a bit of a 32-bit set");

 public:
  struct Edges {
    E from;
    std::initializer_list<E> to;
  };

  // names[i] names the state whose value is i; a state without edges is final.
  StateTable(std::string_view machine, const std::array<std::string_view, N>& names, std::initializer_list<Edges> edges)
      : machine_(machine), names_(names) {
    for (const Edges& e : edges) {
      for (E to : e.to) legal_[index(e.from)] |= std::uint32_t{1} << index(to);
    }
  }

  // The same, its names from the enum's word table (in the enum's order).
  StateTable(std::string_view machine, const EnumName<E> (&names)[N], std::initializer_list<Edges> edges)
      : StateTable(machine, words(names), edges) {}

  std::string_view machine() const { return machine_; }
  std::string_view name(E s) const { return index(s) < N ? names_[index(s)] : std::string_view("?"); }
  bool allows(E from, E to) const { return index(from) < N && index(to) < N && (legal_[index(from)] >> index(to)) & 1u; }

 private:
  static constexpr std::size_t index(E s) { return static_cast<std::size_t>(s); }
  static std::array<std::string_view, N> words(const EnumName<E> (&names)[N]) {
    std::array<std::string_view, N> w{};
    for (const EnumName<E>& n : names) w[index(n.value)] = n.name;
    return w;
  }
  std::string_view machine_;
  std::array<std::string_view, N> names_;
  std::array<std::uint32_t, N> legal_{};  // bit `to` of legal_[from]
};

// Moves `state` to `to` where the table allows it; otherwise says so and aborts.
template <class E, std::size_t N>
void move_state(const StateTable<E, N>& table, E& state, E to, std::string_view who) {
  if (!table.allows(state, to)) {
    const auto s = [](std::string_view v) { return static_cast<int>(v.size()); };
    const std::string_view m = table.machine(), from = table.name(state), next = table.name(to);
    std::fprintf(stderr, "%.*s %.*s: illegal transition %.*s -> %.*s\n", s(m), m.data(), s(who), who.data(), s(from),
                 from.data(), s(next), next.data());
    std::abort();
  }
  state = to;
}

// The same, naming the machine's instance by number (a connection's, a request's).
template <class E, std::size_t N>
void move_state(const StateTable<E, N>& table, E& state, E to, std::uint64_t id) {
  if (table.allows(state, to)) {
    state = to;
    return;
  }
  char who[24];
  std::snprintf(who, sizeof who, "%llu", static_cast<unsigned long long>(id));
  move_state(table, state, to, std::string_view(who));
}

}  // namespace uma
