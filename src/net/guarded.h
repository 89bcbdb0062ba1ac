// run_guarded: the exception boundary every front end puts around the handlers it runs for one
// connection. Whatever escapes `f` is handed, as text, to `on_exception` (which answers that one
// connection with an internal error and closes it); nothing reaches the I/O loop.
#pragma once

#include <exception>

namespace uma {

template <typename F, typename OnException>
void run_guarded(F&& f, OnException&& on_exception) {
  try {
    f();
  } catch (const std::exception& e) {
    on_exception(e.what());
  } catch (...) {
    on_exception("unknown exception");
  }
}

}  // namespace uma
