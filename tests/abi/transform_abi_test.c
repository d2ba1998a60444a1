/* The plugin ABI as a C compiler sees it: include/walrelay/transform.h alone, compiled as
 * C11 with -pedantic -Werror. The layout checks pin what plugins already built rely on: a
 * change that moves a field must fail here, and needs a new WALRELAY_TRANSFORM_ABI_VERSION.
 * main() then drives a minimal plugin through its descriptor the way the host does. */
#include <walrelay/transform.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define PTR sizeof(void *)

/* Every growable struct starts with its size; the descriptor with size then version. */
_Static_assert(offsetof(walrelay_transform_plugin, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(walrelay_transform_plugin, abi_version) == 4, "abi_version second");
_Static_assert(offsetof(walrelay_transform_plugin, name) == 8, "name");
_Static_assert(offsetof(walrelay_transform_plugin, create) == 8 + 2 * PTR, "create");
_Static_assert(offsetof(walrelay_transform_plugin, apply) == 8 + 3 * PTR, "apply");
_Static_assert(offsetof(walrelay_transform_plugin, destroy) == 8 + 4 * PTR, "destroy");
_Static_assert(offsetof(walrelay_host_api, abi_version) == 4, "host abi_version");
_Static_assert(offsetof(walrelay_host_api, log) == 8, "host log");
_Static_assert(offsetof(walrelay_create_args, host_api) == PTR, "create args");
_Static_assert(offsetof(walrelay_create_args, config_count) == 6 * PTR, "create args end");

_Static_assert(sizeof(walrelay_bytes) == 2 * PTR, "bytes are pointer + length");
_Static_assert(sizeof(walrelay_header) == 4 * PTR, "header is two byte ranges");
_Static_assert(offsetof(walrelay_record, partition) == 4, "record partition");
_Static_assert(offsetof(walrelay_record, topic) == 8, "record topic");
_Static_assert(offsetof(walrelay_record, headers) == 8 + 6 * PTR, "record headers");
_Static_assert(offsetof(walrelay_record, timestamp_ms) == 8 + 8 * PTR, "record timestamp");
_Static_assert(offsetof(walrelay_record, source) == 16 + 8 * PTR, "record source");
_Static_assert(offsetof(walrelay_source, lsn) == 8, "source lsn");
_Static_assert(offsetof(walrelay_source, table) == 16, "source table");

_Static_assert(WALRELAY_OK == 0 && WALRELAY_DROP == 1 && WALRELAY_ERROR == 2, "status values");
_Static_assert(WALRELAY_OP_INSERT == 'c' && WALRELAY_OP_DELETE == 'd', "Debezium op letters");
_Static_assert(WALRELAY_PARTITION_ANY == -1, "any partition");

/* A plugin that upper-cases the first byte of the topic into its own buffer. */
typedef struct upper {
  char topic[64];
} upper;

static upper the_instance;

static walrelay_status upper_create(const walrelay_create_args *args, void **instance, char *error,
                                    size_t error_size) {
  if (args->config_count != 0) {
    snprintf(error, error_size, "unknown key '%s'", args->config[0].key);
    return WALRELAY_ERROR;
  }
  *instance = &the_instance;
  return WALRELAY_OK;
}

static walrelay_status upper_apply(void *instance, const walrelay_record *in, walrelay_record *out,
                                   char *error, size_t error_size) {
  upper *u = (upper *)instance;
  if (in->topic.size >= sizeof u->topic) {
    snprintf(error, error_size, "topic too long");
    return WALRELAY_ERROR;
  }
  memcpy(u->topic, in->topic.data, in->topic.size);
  if (u->topic[0] >= 'a' && u->topic[0] <= 'z') u->topic[0] = (char)(u->topic[0] - 'a' + 'A');
  out->topic.data = u->topic;
  return WALRELAY_OK;
}

static void upper_destroy(void *instance) { (void)instance; }

static const walrelay_transform_plugin kUpper = {sizeof(walrelay_transform_plugin),
                                                 WALRELAY_TRANSFORM_ABI_VERSION,
                                                 "upper",
                                                 "1",
                                                 upper_create,
                                                 upper_apply,
                                                 upper_destroy};

const walrelay_transform_plugin *walrelay_transform_entry(uint32_t host_abi_version) {
  return host_abi_version == WALRELAY_TRANSFORM_ABI_VERSION ? &kUpper : NULL;
}

static void host_log(walrelay_host *host, int32_t level, const char *message) {
  (void)host;
  (void)level;
  (void)message;
}

int main(void) {
  const walrelay_host_api api = {sizeof(walrelay_host_api), WALRELAY_TRANSFORM_ABI_VERSION,
                                 host_log};
  const walrelay_create_args args = {sizeof(walrelay_create_args), &api, NULL, "c", "up", NULL, 0};
  const walrelay_source source = {sizeof(walrelay_source), WALRELAY_OP_INSERT, 1, {"s.t", 3}, 0, 1};
  const walrelay_record in = {sizeof(walrelay_record),
                              WALRELAY_PARTITION_ANY,
                              {"orders", 6},
                              {NULL, 0},
                              {"{}", 2},
                              NULL,
                              0,
                              0,
                              &source};
  walrelay_record out = in;
  char error[WALRELAY_ERROR_SIZE_MIN] = "";
  void *instance = NULL;
  const walrelay_transform_plugin *p = walrelay_transform_entry(WALRELAY_TRANSFORM_ABI_VERSION);

  if (p == NULL || walrelay_transform_entry(WALRELAY_TRANSFORM_ABI_VERSION + 1) != NULL) return 1;
  if (p->create(&args, &instance, error, sizeof error) != WALRELAY_OK) return 2;
  if (p->apply(instance, &in, &out, error, sizeof error) != WALRELAY_OK) return 3;
  if (out.topic.size != 6 || memcmp(out.topic.data, "Orders", 6) != 0) return 4;
  if (out.key.data != NULL || out.value.data != in.value.data) return 5;
  p->destroy(instance);
  puts("transform ABI: C11 OK");
  return 0;
}
