/* walrelay transform plugin ABI, version 1.
 *
 * A transform plugin is a shared object that walrelay loads at start (dlopen, RTLD_NOW |
 * RTLD_LOCAL) and runs in its transform chain, like a Kafka Connect single-message transform:
 * one record in, that record changed, dropped or failed. This header is the whole contract; a
 * plugin includes nothing else from walrelay and never links against it (docs/plugins.md).
 *
 * Conventions:
 *  - Plain C11, usable from C and C++. Only fixed-width integers, size_t, pointers and enums
 *    with explicit values cross the boundary. Nothing may throw across it: a C++ plugin
 *    catches every exception in its callbacks and reports it as WALRELAY_ERROR.
 *  - One exported symbol, walrelay_transform_entry(), returns the plugin's descriptor. Every
 *    struct that may grow starts with `struct_size`; fields are only ever appended, so a
 *    larger or smaller struct from another build stays readable. WALRELAY_TRANSFORM_ABI_VERSION
 *    changes only when something is removed or changes meaning; the host refuses a plugin
 *    built for another version.
 *  - Bytes are (pointer, length) pairs, never NUL-terminated. A NULL pointer means null (a
 *    null key, a tombstone value, a null header value); an empty but present value has a
 *    non-NULL pointer and size 0. Configuration, names and messages are NUL-terminated UTF-8.
 *  - Memory is freed only by the side that allocated it:
 *      * everything the host passes in (records, configuration, names) is host-owned,
 *        read-only and valid only during the call, unless stated otherwise;
 *      * everything the plugin hands back (output record fields, the descriptor) is
 *        plugin-owned; the host copies what it needs before it makes any other call into the
 *        plugin, so a plugin may reuse one buffer per instance from one apply() to the next;
 *      * error messages are written into a buffer the host owns (error, error_size).
 *  - Threads: every callback runs on walrelay's single event-loop thread, one call at a time,
 *    and must not block (no network or disk I/O per record). Instances share nothing through
 *    the host; a plugin that keeps global state must allow several instances (two aliases may
 *    name the same plugin).
 */
#ifndef WALRELAY_TRANSFORM_H_
#define WALRELAY_TRANSFORM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. The host passes its own to the entry function and
 * compares the descriptor's abi_version with it before calling anything else. */
#define WALRELAY_TRANSFORM_ABI_VERSION 1u

/* The one symbol the host looks up. */
#define WALRELAY_TRANSFORM_ENTRY_SYMBOL "walrelay_transform_entry"

/* Marks the entry function as exported when the plugin builds with -fvisibility=hidden (as it
 * should: nothing else needs to leave the shared object). */
#if defined(_WIN32)
#define WALRELAY_TRANSFORM_EXPORT __declspec(dllexport)
#else
#define WALRELAY_TRANSFORM_EXPORT __attribute__((visibility("default")))
#endif

/* The partition value that lets the producer's partitioner choose (by key). */
#define WALRELAY_PARTITION_ANY (-1)

/* The smallest error buffer the host passes. Longer messages are truncated by the plugin
 * (snprintf does that). */
#define WALRELAY_ERROR_SIZE_MIN 256u

/* What a callback reports. */
typedef enum walrelay_status {
  WALRELAY_OK = 0,   /* create(): the instance is ready. apply(): pass the record on as *out. */
  WALRELAY_DROP = 1, /* apply() only: drop the record; no later transform sees it. */
  WALRELAY_ERROR = 2 /* failed; a message is in the error buffer. For apply() the host's
                        error policy decides (stop without confirming, or dead-letter). Any
                        other value is treated as WALRELAY_ERROR. */
} walrelay_status;

/* The row operation a record came from: Debezium's `op` letters. */
typedef enum walrelay_operation {
  WALRELAY_OP_INSERT = 'c',
  WALRELAY_OP_UPDATE = 'u',
  WALRELAY_OP_DELETE = 'd',
  WALRELAY_OP_TRUNCATE = 't',
  WALRELAY_OP_MESSAGE = 'm'
} walrelay_operation;

/* Levels for walrelay_host_api.log. */
typedef enum walrelay_log_level {
  WALRELAY_LOG_DEBUG = 1,
  WALRELAY_LOG_INFO = 2,
  WALRELAY_LOG_WARN = 3,
  WALRELAY_LOG_ERROR = 4
} walrelay_log_level;

/* Bytes: data == NULL means null. */
typedef struct walrelay_bytes {
  const char *data;
  size_t size;
} walrelay_bytes;

/* One Kafka record header. The key is never null; the value may be. Names may repeat. */
typedef struct walrelay_header {
  walrelay_bytes key;
  walrelay_bytes value;
} walrelay_header;

/* Where a record came from. Read-only: a transform cannot change it. */
typedef struct walrelay_source {
  uint32_t struct_size;   /* sizeof(walrelay_source) as the host built it */
  int32_t operation;      /* a walrelay_operation */
  uint64_t lsn;           /* WAL position of the row change (PostgreSQL prints it "X/X") */
  walrelay_bytes table;   /* "schema.table" */
  int64_t commit_time_ms; /* commit time of the transaction, ms since the Unix epoch */
  uint32_t xid;           /* transaction id */
} walrelay_source;

/* One record as it goes to Kafka.
 *
 * The value is always bytes: when no transform before the plugin has replaced the structured
 * change event, the host first renders it as the Debezium change event JSON. */
typedef struct walrelay_record {
  uint32_t struct_size;           /* sizeof(walrelay_record) as the host built it */
  int32_t partition;              /* WALRELAY_PARTITION_ANY, or a partition number */
  walrelay_bytes topic;           /* never null or empty */
  walrelay_bytes key;             /* null = null key */
  walrelay_bytes value;           /* null = tombstone */
  const walrelay_header *headers; /* header_count entries, in order */
  size_t header_count;
  int64_t timestamp_ms;          /* record timestamp, ms since the Unix epoch (the commit time) */
  const walrelay_source *source; /* never NULL; ignored in the output record */
} walrelay_record;

/* The host's side of one transform instance; pass it back to the host API functions. */
typedef struct walrelay_host walrelay_host;

/* Functions the host offers plugins. Valid, with the walrelay_host handle, from create()
 * until destroy() returns. */
typedef struct walrelay_host_api {
  uint32_t struct_size; /* check it before using a field added after version 1's */
  uint32_t abi_version;
  /* Writes `message` (NUL-terminated UTF-8, copied during the call) to walrelay's log at
   * `level` (a walrelay_log_level), prefixed with the transform's alias and plugin name.
   * Do not log record contents that may hold personal data. */
  void (*log)(walrelay_host *host, int32_t level, const char *message);
} walrelay_host_api;

/* One `transforms.<alias>.<key>` setting, with the `transforms.<alias>.` prefix removed.
 * The chain's own keys (type, predicate, negate) are not passed. */
typedef struct walrelay_config_entry {
  const char *key;
  const char *value;
} walrelay_config_entry;

/* What create() receives. Strings and the config array are valid during create() only;
 * host_api and host stay valid until destroy() returns. */
typedef struct walrelay_create_args {
  uint32_t struct_size;
  const walrelay_host_api *host_api;
  walrelay_host *host;
  const char *connector_name; /* the connector's `name` */
  const char *alias;          /* this transform's alias in `transforms=...` */
  const walrelay_config_entry *config;
  size_t config_count;
} walrelay_create_args;

/* The plugin's descriptor: static storage in the plugin, returned by the entry function.
 *
 * create(args, &instance, error, error_size)
 *   Reads the configuration and makes one instance. Unknown keys and bad values should be
 *   refused here, with a message naming the key, so a mistake stops walrelay at start
 *   rather than on the first record. On WALRELAY_OK, *instance (which may be left NULL) is
 *   passed to every later apply() and to destroy(). On WALRELAY_ERROR the plugin has freed
 *   whatever it allocated; the host does not call destroy() and refuses to start.
 *
 * apply(instance, in, out, error, error_size)
 *   Transforms one record. `in` is the record, host-owned and read-only. `*out` arrives as a
 *   copy of `*in` (same pointers), so a field the plugin leaves alone stays as it was. To
 *   change a field, point it at new bytes: static data, bytes inside `in`, or memory the
 *   plugin owns and keeps unchanged until its next call into the plugin (the host copies the
 *   output first). To change headers, point out->headers at a new array (it may mix
 *   entries copied from in->headers with new ones). Return WALRELAY_OK to pass the record
 *   on, WALRELAY_DROP to drop it, WALRELAY_ERROR to fail it (out is then ignored).
 *
 * destroy(instance)
 *   Frees the instance. Called once for each successful create(), before the library is
 *   unloaded; never concurrently with apply().
 */
typedef struct walrelay_transform_plugin {
  uint32_t struct_size; /* sizeof(walrelay_transform_plugin) */
  uint32_t abi_version; /* WALRELAY_TRANSFORM_ABI_VERSION */
  const char *name;     /* short name for messages, e.g. "cloudevents" */
  const char *version;  /* the plugin's own version, e.g. "1.0.0" */
  walrelay_status (*create)(const walrelay_create_args *args, void **instance, char *error,
                            size_t error_size);
  walrelay_status (*apply)(void *instance, const walrelay_record *in, walrelay_record *out,
                           char *error, size_t error_size);
  void (*destroy)(void *instance);
} walrelay_transform_plugin;

/* The entry function's type, for the host's dlsym. */
typedef const walrelay_transform_plugin *(*walrelay_transform_entry_fn)(uint32_t host_abi_version);

/* Every plugin defines this function (and nothing else needs exporting). It may be called
 * more than once; it returns the same static descriptor, or NULL when the plugin cannot serve
 * `host_abi_version` (the host then names both versions in its error). */
WALRELAY_TRANSFORM_EXPORT const walrelay_transform_plugin *walrelay_transform_entry(
    uint32_t host_abi_version);

#ifdef __cplusplus
}
#endif

#endif /* WALRELAY_TRANSFORM_H_ */
