#include "e2e/oracle.h"

#include "e2e/daemon_harness.h"

namespace uma::test {

const Oracle& oracle() {
  static const Oracle o(model_path("oracle.gguf"));
  return o;
}

}  // namespace uma::test
