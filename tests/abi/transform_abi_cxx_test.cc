// include/walrelay/transform.h as a strict C++ compiler sees it (C++11, -pedantic -Werror):
// the header must serve C++ plugins without walrelay's own sources or C++20.
#include <walrelay/transform.h>

#include <cstdio>
#include <type_traits>

static_assert(std::is_standard_layout<walrelay_record>::value, "C layout");
static_assert(std::is_trivially_copyable<walrelay_record>::value, "out starts as a copy of in");
static_assert(std::is_same<decltype(&walrelay_transform_entry), walrelay_transform_entry_fn>::value,
              "the entry function has the type the host looks it up as");

int main() {
  std::puts("transform ABI: C++11 OK");
  return 0;
}
