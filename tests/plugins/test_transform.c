/* test_transform: a plugin for walrelay's tests, in plain C, that does one configurable thing
 * to every record so the tests can watch the host's side of the ABI.
 *
 *   action=tag (default)  appends `tag` to the value of the `trace` header (adds it if absent)
 *   action=drop           drops the record
 *   action=fail           fails the record with "refused by <alias>"
 *   action=describe       replaces the value with a text describing everything it received
 *   action=rewrite        topic=`topic`, null key, empty value, partition 2, timestamp 42, no
 *                         headers
 *   action=swap           swaps key and value (outputs pointing into the input)
 *   action=bad_status     returns 7, which no version of the ABI defines
 *   action=empty_topic    sets an empty topic
 *   action=long_error     fails with an error buffer filled to the end, without a terminator
 * Every instance logs "created <alias> for <connector>" at info when it is created, and
 * "destroyed <alias>" when it is destroyed. Unknown keys fail create(). */
#include <walrelay/transform.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum action { TAG, DROP, FAIL, DESCRIBE, REWRITE, SWAP, BAD_STATUS, EMPTY_TOPIC, LONG_ERROR };

static const char *const kActions[] = {"tag",  "drop",       "fail",        "describe",  "rewrite",
                                       "swap", "bad_status", "empty_topic", "long_error"};

typedef struct test_transform {
  enum action action;
  char alias[64];
  char tag[64];
  char topic[64];
  const walrelay_host_api *host_api;
  walrelay_host *host;
  /* Output buffers, reused from one apply() to the next. */
  char text[4096];
  walrelay_header headers[16];
} test_transform;

static walrelay_status test_create(const walrelay_create_args *args, void **instance, char *error,
                                   size_t error_size) {
  char message[160];
  size_t i, a;
  test_transform *t = (test_transform *)calloc(1, sizeof(test_transform));
  if (t == NULL) return WALRELAY_ERROR;
  t->host_api = args->host_api;
  t->host = args->host;
  snprintf(t->alias, sizeof t->alias, "%s", args->alias);
  snprintf(t->topic, sizeof t->topic, "rewritten");
  for (i = 0; i < args->config_count; ++i) {
    const char *key = args->config[i].key;
    const char *value = args->config[i].value;
    if (strcmp(key, "tag") == 0) {
      snprintf(t->tag, sizeof t->tag, "%s", value);
    } else if (strcmp(key, "topic") == 0) {
      snprintf(t->topic, sizeof t->topic, "%s", value);
    } else if (strcmp(key, "action") == 0) {
      for (a = 0; a < sizeof kActions / sizeof kActions[0]; ++a)
        if (strcmp(value, kActions[a]) == 0) break;
      if (a == sizeof kActions / sizeof kActions[0]) {
        snprintf(error, error_size, "unknown action '%s'", value);
        free(t);
        return WALRELAY_ERROR;
      }
      t->action = (enum action)a;
    } else {
      snprintf(error, error_size, "unknown key '%s'", key);
      free(t);
      return WALRELAY_ERROR;
    }
  }
  snprintf(message, sizeof message, "created %s for %s", t->alias, args->connector_name);
  t->host_api->log(t->host, WALRELAY_LOG_INFO, message);
  *instance = t;
  return WALRELAY_OK;
}

static void test_destroy(void *instance) {
  test_transform *t = (test_transform *)instance;
  char message[96];
  snprintf(message, sizeof message, "destroyed %s", t->alias);
  t->host_api->log(t->host, WALRELAY_LOG_INFO, message);
  free(t);
}

static int is_named(walrelay_bytes b, const char *name) {
  return b.size == strlen(name) && memcmp(b.data, name, b.size) == 0;
}

/* Appends "[text]" (or "null") to t->text at *used. */
static void describe_bytes(test_transform *t, size_t *used, const char *label, walrelay_bytes b) {
  if (*used >= sizeof t->text) return;
  if (b.data == NULL) {
    *used += (size_t)snprintf(t->text + *used, sizeof t->text - *used, "%s=null ", label);
  } else {
    *used += (size_t)snprintf(t->text + *used, sizeof t->text - *used, "%s=[%.*s] ", label,
                              (int)b.size, b.data);
  }
}

static walrelay_status tag(test_transform *t, const walrelay_record *in, walrelay_record *out) {
  size_t i, count = 0;
  int found = 0;
  for (i = 0; i < in->header_count && count < 15; ++i) {
    t->headers[count] = in->headers[i];
    if (!found && is_named(in->headers[i].key, "trace")) {
      const walrelay_bytes old = in->headers[i].value;
      snprintf(t->text, sizeof t->text, "%.*s%s", (int)(old.data ? old.size : 0),
               old.data ? old.data : "", t->tag);
      t->headers[count].value.data = t->text;
      t->headers[count].value.size = strlen(t->text);
      found = 1;
    }
    ++count;
  }
  if (!found) {
    snprintf(t->text, sizeof t->text, "%s", t->tag);
    t->headers[count].key.data = "trace";
    t->headers[count].key.size = 5;
    t->headers[count].value.data = t->text;
    t->headers[count].value.size = strlen(t->text);
    ++count;
  }
  out->headers = t->headers;
  out->header_count = count;
  return WALRELAY_OK;
}

static walrelay_status describe(test_transform *t, const walrelay_record *in,
                                walrelay_record *out) {
  size_t used = 0, i;
  const walrelay_source *s = in->source;
  describe_bytes(t, &used, "topic", in->topic);
  describe_bytes(t, &used, "key", in->key);
  describe_bytes(t, &used, "value", in->value);
  for (i = 0; i < in->header_count; ++i) {
    describe_bytes(t, &used, "header", in->headers[i].key);
    describe_bytes(t, &used, "header.value", in->headers[i].value);
  }
  if (used < sizeof t->text) {
    used += (size_t)snprintf(t->text + used, sizeof t->text - used,
                             "timestamp=%lld partition=%d op=%c lsn=%llu commit=%lld xid=%u ",
                             (long long)in->timestamp_ms, (int)in->partition, (char)s->operation,
                             (unsigned long long)s->lsn, (long long)s->commit_time_ms,
                             (unsigned)s->xid);
  }
  describe_bytes(t, &used, "table", s->table);
  out->value.data = t->text;
  out->value.size = used < sizeof t->text ? used : sizeof t->text - 1;
  return WALRELAY_OK;
}

static walrelay_status test_apply(void *instance, const walrelay_record *in, walrelay_record *out,
                                  char *error, size_t error_size) {
  test_transform *t = (test_transform *)instance;
  switch (t->action) {
    case TAG: return tag(t, in, out);
    case DROP: return WALRELAY_DROP;
    case FAIL: snprintf(error, error_size, "refused by %s", t->alias); return WALRELAY_ERROR;
    case DESCRIBE: return describe(t, in, out);
    case REWRITE:
      out->topic.data = t->topic;
      out->topic.size = strlen(t->topic);
      out->key.data = NULL;
      out->key.size = 0;
      out->value.data = "";
      out->value.size = 0;
      out->partition = 2;
      out->timestamp_ms = 42;
      out->headers = NULL;
      out->header_count = 0;
      return WALRELAY_OK;
    case SWAP:
      out->key = in->value;
      out->value = in->key;
      return WALRELAY_OK;
    case BAD_STATUS: return (walrelay_status)7;
    case EMPTY_TOPIC: out->topic.size = 0; return WALRELAY_OK;
    case LONG_ERROR: memset(error, 'x', error_size); return WALRELAY_ERROR;
  }
  return WALRELAY_ERROR;
}

static const walrelay_transform_plugin kTestPlugin = {sizeof(walrelay_transform_plugin),
                                                      WALRELAY_TRANSFORM_ABI_VERSION,
                                                      "test_transform",
                                                      "0.1",
                                                      test_create,
                                                      test_apply,
                                                      test_destroy};

const walrelay_transform_plugin *walrelay_transform_entry(uint32_t host_abi_version) {
  (void)host_abi_version;
  return &kTestPlugin;
}
