#include "decode/pgoutput_decoder.h"

#include <algorithm>

#include "common/pg_time.h"

namespace walrelay {
namespace {

Status DecodeError(Lsn at, const std::string& what) {
  return Status::Decode("pgoutput message at LSN " + at.ToString() + ": " + what);
}

// Built-in types (OIDs below FirstGenbkiObjectId, for which pgoutput sends no Type message):
// the name format_type gives without a typmod, and the array type's OID.
struct BuiltinType {
  uint32_t oid;
  std::string_view typname;  // pg_type.typname
  std::string_view display;  // format_type(oid, -1), quotes already removed as wal2json does
  uint32_t array_oid;
};

constexpr BuiltinType kBuiltinTypes[] = {
    {16, "bool", "boolean", 1000},
    {17, "bytea", "bytea", 1001},
    {18, "char", "char", 1002},
    {19, "name", "name", 1003},
    {20, "int8", "bigint", 1016},
    {21, "int2", "smallint", 1005},
    {23, "int4", "integer", 1007},
    {24, "regproc", "regproc", 1008},
    {25, "text", "text", 1009},
    {26, "oid", "oid", 1028},
    {27, "tid", "tid", 1010},
    {28, "xid", "xid", 1011},
    {29, "cid", "cid", 1012},
    {114, "json", "json", 199},
    {142, "xml", "xml", 143},
    {600, "point", "point", 1017},
    {601, "lseg", "lseg", 1018},
    {602, "path", "path", 1019},
    {603, "box", "box", 1020},
    {604, "polygon", "polygon", 1027},
    {628, "line", "line", 629},
    {650, "cidr", "cidr", 651},
    {700, "float4", "real", 1021},
    {701, "float8", "double precision", 1022},
    {718, "circle", "circle", 719},
    {774, "macaddr8", "macaddr8", 775},
    {790, "money", "money", 791},
    {829, "macaddr", "macaddr", 1040},
    {869, "inet", "inet", 1041},
    {1042, "bpchar", "bpchar", 1014},
    {1043, "varchar", "character varying", 1015},
    {1082, "date", "date", 1182},
    {1083, "time", "time without time zone", 1183},
    {1114, "timestamp", "timestamp without time zone", 1115},
    {1184, "timestamptz", "timestamp with time zone", 1185},
    {1186, "interval", "interval", 1187},
    {1266, "timetz", "time with time zone", 1270},
    {1560, "bit", "bit", 1561},
    {1562, "varbit", "bit varying", 1563},
    {1700, "numeric", "numeric", 1231},
    {1790, "refcursor", "refcursor", 2201},
    {2205, "regclass", "regclass", 2210},
    {2206, "regtype", "regtype", 2211},
    {2950, "uuid", "uuid", 2951},
    {3220, "pg_lsn", "pg_lsn", 3221},
    {3614, "tsvector", "tsvector", 3643},
    {3615, "tsquery", "tsquery", 3645},
    {3802, "jsonb", "jsonb", 3807},
    {3904, "int4range", "int4range", 3905},
    {3906, "numrange", "numrange", 3907},
    {3908, "tsrange", "tsrange", 3909},
    {3910, "tstzrange", "tstzrange", 3911},
    {3912, "daterange", "daterange", 3913},
    {3926, "int8range", "int8range", 3927},
    {4072, "jsonpath", "jsonpath", 4073},
};

// FirstGenbkiObjectId: pgoutput sends Type messages for types at or above it.
constexpr uint32_t kFirstNonBuiltinOid = 10000;
constexpr int32_t kVarHdrSz = 4;

const BuiltinType* BuiltinByOid(uint32_t oid) {
  for (const auto& t : kBuiltinTypes)
    if (t.oid == oid) return &t;
  return nullptr;
}
const BuiltinType* BuiltinByArrayOid(uint32_t oid) {
  for (const auto& t : kBuiltinTypes)
    if (t.array_oid == oid) return &t;
  return nullptr;
}
const BuiltinType* BuiltinByTypname(std::string_view name) {
  for (const auto& t : kBuiltinTypes)
    if (t.typname == name) return &t;
  return nullptr;
}

// intervaltypmodout's field names, by the INTERVAL_MASK bits of the typmod's range.
std::string_view IntervalFields(int32_t range) {
  constexpr int32_t kMonth = 1 << 1, kYear = 1 << 2, kDay = 1 << 3, kHour = 1 << 10,
                    kMinute = 1 << 11, kSecond = 1 << 12;
  switch (range) {
    case kYear: return " year";
    case kMonth: return " month";
    case kDay: return " day";
    case kHour: return " hour";
    case kMinute: return " minute";
    case kSecond: return " second";
    case kYear | kMonth: return " year to month";
    case kDay | kHour: return " day to hour";
    case kDay | kHour | kMinute: return " day to minute";
    case kDay | kHour | kMinute | kSecond: return " day to second";
    case kHour | kMinute: return " hour to minute";
    case kHour | kMinute | kSecond: return " hour to second";
    case kMinute | kSecond: return " minute to second";
    default: return "";
  }
}

// format_type(oid, typmod) for a built-in scalar type, as wal2json prints it.
std::string FormatBuiltin(const BuiltinType& t, int32_t typmod) {
  std::string out;
  auto paren = [](int32_t n) { return "(" + std::to_string(n) + ")"; };
  // time, timestamp: "timestamp(3) without time zone", or the plain name without a typmod.
  auto with_precision = [&](const char* name, const char* zone) {
    return typmod >= 0 ? name + paren(typmod) + zone : std::string(t.display);
  };
  switch (t.oid) {
    case 1042:  // bpchar: "bpchar" without a typmod, as format_type keeps it distinct
      return typmod > kVarHdrSz ? "character" + paren(typmod - kVarHdrSz)
             : typmod >= 0      ? "character"
                                : "bpchar";
    case 1043:
      return typmod > kVarHdrSz ? "character varying" + paren(typmod - kVarHdrSz)
                                : "character varying";
    case 1700:
      if (typmod < kVarHdrSz) return "numeric";
      {
        const int32_t t_mod = typmod - kVarHdrSz;
        const int32_t precision = (t_mod >> 16) & 0xffff;
        const int32_t scale = ((t_mod & 0x7ff) ^ 1024) - 1024;
        return "numeric(" + std::to_string(precision) + "," + std::to_string(scale) + ")";
      }
    case 1083: return with_precision("time", " without time zone");
    case 1266: return with_precision("time", " with time zone");
    case 1114: return with_precision("timestamp", " without time zone");
    case 1184: return with_precision("timestamp", " with time zone");
    case 1560: return typmod >= 0 ? "bit" + paren(typmod) : "bit";
    case 1562: return typmod >= 0 ? "bit varying" + paren(typmod) : "bit varying";
    case 1186: {
      if (typmod < 0) return "interval";
      const int32_t precision = typmod & 0xffff;
      out = "interval";
      out += IntervalFields((typmod >> 16) & 0x7fff);
      if (precision != 0xffff) out += paren(precision);
      return out;
    }
    default: return std::string(t.display);
  }
}

// quote_identifier without the keyword list: quotes names that are not plain lower-case.
std::string QuoteIdentifier(std::string_view name) {
  bool safe = !name.empty() && ((name[0] >= 'a' && name[0] <= 'z') || name[0] == '_');
  for (char c : name) safe = safe && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (safe) return std::string(name);
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// wal2json prints format_type's result with a leading and a trailing quote removed.
std::string StripOuterQuotes(std::string name) {
  if (name.size() >= 2 && name.front() == '"' && name.back() == '"')
    return name.substr(1, name.size() - 2);
  return name;
}

// How a column's text becomes a Column (wal2json's rendering by type).
enum class ValueClass : uint8_t { kText, kNumber, kBool, kBytea };

ValueClass ClassOf(std::string_view type) {
  if (IsNumberTypeName(type)) return ValueClass::kNumber;
  if (type == "boolean") return ValueClass::kBool;
  if (type == "bytea") return ValueClass::kBytea;
  return ValueClass::kText;
}

}  // namespace

// Bounds-checked big-endian reader over one message. A read past the end marks the reader
// failed and returns zeros; callers check ok() before using what they read.
class PgOutputDecoder::Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool ok() const { return ok_; }
  size_t left() const { return data_.size() - pos_; }
  size_t pos() const { return pos_; }

  uint8_t U8() { return static_cast<uint8_t>(Take(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Take(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Take(4)); }
  uint64_t U64() { return Take(8); }
  // A NUL-terminated string.
  std::string_view CString() {
    if (!ok_) return {};
    const size_t end = data_.find('\0', pos_);
    if (end == std::string_view::npos) return Fail();
    const std::string_view s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  std::string_view Bytes(size_t n) {
    if (!ok_ || n > left()) return Fail();
    const std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  std::string_view Fail() {
    ok_ = false;
    pos_ = data_.size();
    return {};
  }
  uint64_t Take(size_t n) {
    if (!ok_ || n > left()) {
      Fail();
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(data_[pos_ + i]);
    pos_ += n;
    return v;
  }

  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

struct PgOutputDecoder::Relation {
  struct Attribute {
    std::string name;
    uint32_t type_oid = 0;
    int32_t typmod = -1;
    bool key = false;  // part of the replica identity
    std::string type;  // rendered as wal2json prints it
    ValueClass value_class = ValueClass::kText;
    bool optional = true;  // not a primary-key column
  };
  uint32_t id = 0;
  std::string schema;
  std::string table;
  char replica_identity = 'd';
  std::vector<Attribute> attributes;
  std::vector<std::string> primary_key;
  enum class Verdict : uint8_t { kUnknown, kWanted, kRefused } verdict = Verdict::kUnknown;
};

PgOutputDecoder::PgOutputDecoder(DecoderOptions options) : options_(std::move(options)) {}
PgOutputDecoder::~PgOutputDecoder() = default;
PgOutputDecoder::PgOutputDecoder(PgOutputDecoder&&) noexcept = default;
PgOutputDecoder& PgOutputDecoder::operator=(PgOutputDecoder&&) noexcept = default;

std::string PgOutputDecoder::StartReplicationOptions(int server_version) const {
  return PgOutputStartOptions(options_.publication_names, server_version >= kPgOutputMessagesSince);
}

void PgOutputDecoder::SetTableFilter(TableFilter filter) {
  table_filter_ = std::move(filter);
  for (auto& [id, relation] : relations_) relation->verdict = Relation::Verdict::kUnknown;
}

bool PgOutputDecoder::Wanted(Relation& relation) {
  if (!table_filter_) return true;
  if (relation.verdict == Relation::Verdict::kUnknown) {
    relation.verdict = table_filter_(relation.schema, relation.table) ? Relation::Verdict::kWanted
                                                                      : Relation::Verdict::kRefused;
  }
  return relation.verdict == Relation::Verdict::kWanted;
}

Result<PgOutputDecoder::Relation*> PgOutputDecoder::FindRelation(uint32_t id, Lsn at) {
  auto it = relations_.find(id);
  if (it == relations_.end()) {
    return DecodeError(
        at, "row of relation id " + std::to_string(id) + " that no Relation message announced");
  }
  return it->second.get();
}

const DecodedMessage* PgOutputDecoder::Next() {
  if (pending_ == 0) return nullptr;
  --pending_;
  if (next_truncated_ < truncated_.size()) {
    // Relations were checked when the Truncate was decoded.
    Relation& relation = *relations_.at(truncated_[next_truncated_++]);
    RowChange& change = decoded_.change;
    decoded_.kind = Wanted(relation) ? MessageKind::kChange : MessageKind::kExcludedChange;
    change.op = ChangeOp::kTruncate;
    change.lsn = truncate_lsn_;
    change.xid = xid_;
    change.commit_time_ms = commit_time_ms_;
    change.commit_time_us = commit_time_us_;
    change.schema.assign(relation.schema);
    change.table.assign(relation.table);
    change.columns.clear();
    change.identity.clear();
    change.primary_key.clear();
  }
  return &decoded_;
}

Status PgOutputDecoder::Decode(std::string_view payload, Lsn at) {
  pending_ = 0;
  truncated_.clear();
  next_truncated_ = 0;
  Reader in(payload);
  const char kind = static_cast<char>(in.U8());
  if (!in.ok()) return DecodeError(at, "empty message");
  Status status;
  switch (kind) {
    case 'B': {
      in.U64();  // final LSN of the transaction: its commit record
      const int64_t timestamp = static_cast<int64_t>(in.U64());
      const uint32_t xid = in.U32();
      if (!in.ok()) return DecodeError(at, "truncated Begin");
      xid_ = xid;
      // Microseconds since 2000-01-01, floored to milliseconds as wal2json's text gives them.
      int64_t micros = 0;
      // A commit time is a finite timestamp; one that leaves int64 when shifted to the Unix
      // epoch is a corrupt message, not a time.
      if (__builtin_add_overflow(timestamp, kPgEpochOffsetMicros, &micros))
        return DecodeError(
            at, "Begin with a commit timestamp out of range: " + std::to_string(timestamp));
      commit_time_ms_ = micros >= 0 ? micros / 1000 : -((-micros + 999) / 1000);
      commit_time_us_ = micros;
      decoded_.kind = MessageKind::kBegin;
      decoded_.begin.xid = xid_;
      decoded_.begin.first_lsn = at;
      decoded_.begin.commit_time_ms = commit_time_ms_;
      pending_ = 1;
      return Status::Ok();
    }
    case 'C': {
      in.U8();   // flags, unused
      in.U64();  // LSN of the commit record
      const uint64_t end_lsn = in.U64();
      in.U64();  // commit timestamp, as in Begin
      if (!in.ok()) return DecodeError(at, "truncated Commit");
      decoded_.kind = MessageKind::kCommit;
      decoded_.commit.xid = xid_;
      decoded_.commit.end_lsn = Lsn(end_lsn);
      previous_commit_end_ = Lsn(end_lsn);
      decoded_.commit.commit_time_ms = commit_time_ms_;
      pending_ = 1;
      return Status::Ok();
    }
    case 'O':
      in.U64();
      in.CString();
      if (!in.ok()) return DecodeError(at, "truncated Origin");
      return Status::Ok();
    case 'M': {
      const uint8_t flags = in.U8();
      in.U64();  // the message's LSN, which is also the payload's dataStart
      const std::string_view prefix = in.CString();
      const uint32_t length = in.U32();
      const std::string_view content = in.Bytes(length);
      if (!in.ok()) return DecodeError(at, "truncated Message");
      decoded_.kind = MessageKind::kMessage;
      decoded_.message.lsn = at;
      decoded_.message.transactional = (flags & 1) != 0;
      decoded_.message.prefix.assign(prefix);
      decoded_.message.content.assign(content);
      pending_ = 1;
      return Status::Ok();
    }
    case 'R': return DecodeRelation(in, at);
    case 'Y': return DecodeType(in, at);
    case 'I':
    case 'U':
    case 'D':
      WALRELAY_RETURN_IF_ERROR(DecodeRow(kind, in, at));
      pending_ = 1;
      return Status::Ok();
    case 'T': return DecodeTruncate(in, at);
    default: {
      const auto byte = static_cast<unsigned char>(kind);
      return DecodeError(at, "unknown message type " +
                                 (byte >= 0x20 && byte < 0x7f ? "'" + std::string(1, kind) + "'"
                                                              : "byte " + std::to_string(byte)) +
                                 " (protocol version 1 expected)");
    }
  }
}

Status PgOutputDecoder::DecodeType(Reader& in, Lsn at) {
  const uint32_t oid = in.U32();
  const std::string_view nspname = in.CString();
  const std::string_view typname = in.CString();
  if (!in.ok()) return DecodeError(at, "truncated Type");
  TypeName& t = types_[oid];
  t.nspname.assign(nspname);
  t.typname.assign(typname);
  return Status::Ok();
}

void PgOutputDecoder::RenderTypes(Relation& relation) {
  for (auto& a : relation.attributes) {
    std::string type;
    if (const BuiltinType* b = BuiltinByOid(a.type_oid)) {
      type = FormatBuiltin(*b, a.typmod);
    } else if (const BuiltinType* e = BuiltinByArrayOid(a.type_oid)) {
      type = FormatBuiltin(*e, a.typmod) + "[]";
    } else {
      std::optional<std::string> looked_up;
      if (a.type_oid >= kFirstNonBuiltinOid && options_.catalog.type_name)
        looked_up = options_.catalog.type_name(a.type_oid, a.typmod);
      if (looked_up) {
        type = StripOuterQuotes(std::move(*looked_up));
      } else if (auto it = types_.find(a.type_oid); it != types_.end()) {
        // Array types are named "_<element>"; a domain arrives under its base type's name.
        std::string_view name = it->second.typname;
        const bool array = name.size() > 1 && name[0] == '_';
        if (array) name.remove_prefix(1);
        if (it->second.nspname.empty()) {  // pg_catalog
          const BuiltinType* b = BuiltinByTypname(name);
          type = b ? FormatBuiltin(*b, a.typmod) : std::string(name);
        } else if (it->second.nspname == "public") {
          type = QuoteIdentifier(name);
        } else {
          type = QuoteIdentifier(it->second.nspname) + "." + QuoteIdentifier(name);
        }
        type = StripOuterQuotes(std::move(type));
        if (array) type += "[]";
      } else {
        // Neither built in nor announced: the OID is all the stream says.
        type = std::to_string(a.type_oid);
      }
    }
    a.type = std::move(type);
    a.value_class = ClassOf(a.type);
  }
}

Status PgOutputDecoder::DecodeRelation(Reader& in, Lsn at) {
  auto relation = std::make_unique<Relation>();
  relation->id = in.U32();
  const std::string_view nspname = in.CString();
  relation->schema.assign(nspname.empty() ? "pg_catalog" : nspname);
  relation->table.assign(in.CString());
  relation->replica_identity = static_cast<char>(in.U8());
  const uint16_t count = in.U16();
  if (!in.ok()) return DecodeError(at, "truncated Relation");
  // Every attribute takes at least 10 bytes: do not reserve for a count the message cannot hold.
  if (count > in.left() / 10) return DecodeError(at, "Relation with more columns than bytes");
  relation->attributes.resize(count);
  for (auto& a : relation->attributes) {
    a.key = (in.U8() & 1) != 0;
    a.name.assign(in.CString());
    a.type_oid = in.U32();
    a.typmod = static_cast<int32_t>(in.U32());
  }
  if (!in.ok()) {
    return DecodeError(at, "truncated Relation " + relation->schema + "." + relation->table);
  }
  RenderTypes(*relation);
  std::optional<std::vector<std::string>> key;
  if (options_.catalog.primary_key)
    key = options_.catalog.primary_key(relation->schema, relation->table);
  if (key) {
    relation->primary_key = std::move(*key);
  } else if (relation->replica_identity != 'f') {
    // Under FULL every column is flagged; the flags only name the key otherwise.
    for (const auto& a : relation->attributes)
      if (a.key) relation->primary_key.push_back(a.name);
  }
  std::optional<std::vector<CatalogColumn>> catalog_columns;
  if (options_.catalog.table_columns)
    catalog_columns = options_.catalog.table_columns(relation->schema, relation->table);
  for (auto& a : relation->attributes) {
    a.optional = std::find(relation->primary_key.begin(), relation->primary_key.end(), a.name) ==
                 relation->primary_key.end();
    if (catalog_columns) {
      for (const auto& c : *catalog_columns)
        if (c.name == a.name && c.not_null) a.optional = false;
    }
  }
  const uint32_t id = relation->id;
  relations_[id] = std::move(relation);
  return Status::Ok();
}

Status PgOutputDecoder::ReadTuple(Reader& in, const Relation& relation, bool key_only,
                                  std::vector<Column>& out, std::string& markers, Lsn at) {
  const uint16_t count = in.U16();
  if (!in.ok())
    return DecodeError(at, "truncated row of " + relation.schema + "." + relation.table);
  if (count != relation.attributes.size()) {
    return DecodeError(at, "row of " + relation.schema + "." + relation.table + " has " +
                               std::to_string(count) + " columns, its Relation message " +
                               std::to_string(relation.attributes.size()));
  }
  markers.resize(count);
  size_t written = 0;
  for (size_t i = 0; i < count; ++i) {
    const auto& a = relation.attributes[i];
    const char marker = static_cast<char>(in.U8());
    std::string_view text;
    if (marker == 't' || marker == 'b') {
      const uint32_t length = in.U32();
      text = in.Bytes(length);
    } else if (marker != 'n' && marker != 'u') {
      if (!in.ok()) break;
      return DecodeError(at, "column '" + a.name + "' of " + relation.schema + "." +
                                 relation.table + " has unknown kind byte " +
                                 std::to_string(static_cast<unsigned char>(marker)));
    }
    if (!in.ok()) break;
    if (marker == 'b') {
      return DecodeError(at, "column '" + a.name + "' of " + relation.schema + "." +
                                 relation.table +
                                 " is in binary format; start pgoutput without "
                                 "the binary option");
    }
    markers[i] = marker;
    if (key_only && !a.key) continue;
    if (out.size() <= written) out.emplace_back();
    Column& c = out[written++];
    c.name.assign(a.name);
    c.type.assign(a.type);
    c.optional = a.optional;
    if (marker == 'n') {
      c.kind = ValueKind::kNull;
      c.text.clear();
      continue;
    }
    if (marker == 'u') {
      // Filled in by DecodeRow from the old row, or the placeholder.
      c.kind = ValueKind::kString;
      c.text.clear();
      continue;
    }
    switch (a.value_class) {
      case ValueClass::kNumber:
        // wal2json writes NaN and the infinities of numeric types as null; the text stays
        // for Debezium's rendering under the handling modes (Column::text).
        if (text == "NaN" || text == "Infinity" || text == "-Infinity") {
          c.kind = ValueKind::kNull;
          c.text.assign(text);
        } else {
          c.kind = ValueKind::kNumber;
          c.text.assign(text);
        }
        break;
      case ValueClass::kBool:
        c.kind = ValueKind::kBool;
        c.text.assign(text == "t" ? "true" : "false");
        break;
      case ValueClass::kBytea:
        if (text.starts_with("\\x")) text.remove_prefix(2);
        c.kind = ValueKind::kString;
        c.text.assign(text);
        break;
      case ValueClass::kText:
        c.kind = ValueKind::kString;
        c.text.assign(text);
        break;
    }
  }
  if (!in.ok())
    return DecodeError(at, "truncated row of " + relation.schema + "." + relation.table);
  out.resize(written);
  return Status::Ok();
}

Status PgOutputDecoder::DecodeRow(char kind, Reader& in, Lsn at) {
  const uint32_t id = in.U32();
  if (!in.ok()) return DecodeError(at, "truncated row message");
  auto found = FindRelation(id, at);
  if (!found.ok()) return found.status();
  Relation& relation = **found;
  RowChange& change = decoded_.change;
  change.lsn = at;
  change.xid = xid_;
  change.commit_time_ms = commit_time_ms_;
  change.commit_time_us = commit_time_us_;
  change.previous_commit_end = previous_commit_end_;
  change.before.clear();
  change.schema.assign(relation.schema);
  change.table.assign(relation.table);
  if (!Wanted(relation)) {
    decoded_.kind = MessageKind::kExcludedChange;
    return Status::Ok();
  }
  decoded_.kind = MessageKind::kChange;
  change.op = kind == 'I' ? ChangeOp::kInsert : kind == 'U' ? ChangeOp::kUpdate : ChangeOp::kDelete;
  change.primary_key.resize(relation.primary_key.size());
  for (size_t i = 0; i < relation.primary_key.size(); ++i)
    change.primary_key[i].assign(relation.primary_key[i]);

  char tuple = static_cast<char>(in.U8());
  bool has_old = false, old_is_full = false;
  if ((kind == 'U' || kind == 'D') && (tuple == 'K' || tuple == 'O')) {
    has_old = true;
    old_is_full = tuple == 'O';
    // wal2json's identity: the old key's columns only, or the whole old row.
    WALRELAY_RETURN_IF_ERROR(
        ReadTuple(in, relation, !old_is_full, change.identity, old_markers_, at));
    if (kind == 'U') {
      // A full old row is also where unchanged TOASTed values of the new row are found.
      if (old_is_full) {
        old_row_.swap(change.identity);
      }
      tuple = static_cast<char>(in.U8());
    }
  } else if (kind == 'D') {
    if (!in.ok()) return DecodeError(at, "truncated Delete");
    return DecodeError(at, "Delete from " + relation.schema + "." + relation.table +
                               " without an old key or row ('K' or 'O')");
  }
  if (kind == 'D') {
    FillBefore(relation, change);
    change.columns.clear();
    return Status::Ok();
  }
  if (!in.ok()) return DecodeError(at, "truncated row message");
  if (tuple != 'N') {
    return DecodeError(at, std::string(kind == 'I' ? "Insert" : "Update") + " into " +
                               relation.schema + "." + relation.table + " without a new row ('N')");
  }
  WALRELAY_RETURN_IF_ERROR(ReadTuple(in, relation, false, change.columns, new_markers_, at));
  if (kind == 'I') {
    if (new_markers_.find('u') != std::string::npos)
      return DecodeError(at, "Insert into " + relation.schema + "." + relation.table +
                                 " with an unchanged-TOAST column");
    change.identity.clear();
    return Status::Ok();
  }
  // Update.
  if (old_is_full) {
    for (size_t i = 0; i < new_markers_.size(); ++i) {
      if (new_markers_[i] != 'u') continue;
      change.columns[i].kind = old_row_[i].kind;
      change.columns[i].text.assign(old_row_[i].text);
    }
    change.identity.swap(old_row_);
  } else {
    for (size_t i = 0; i < new_markers_.size(); ++i) {
      if (new_markers_[i] != 'u') continue;
      Column& c = change.columns[i];
      c.kind = ValueKind::kString;
      c.text.assign(relation.attributes[i].value_class == ValueClass::kBytea
                        ? kUnavailableValuePlaceholderHex
                        : kUnavailableValuePlaceholder);
    }
    if (!has_old) {
      // The key did not change: wal2json gives the key columns of the new row.
      size_t written = 0;
      for (size_t i = 0; i < relation.attributes.size(); ++i) {
        if (!relation.attributes[i].key || relation.replica_identity == 'f') continue;
        if (change.identity.size() <= written) change.identity.emplace_back();
        Column& c = change.identity[written++];
        c.name.assign(change.columns[i].name);
        c.type.assign(change.columns[i].type);
        c.kind = change.columns[i].kind;
        c.text.assign(change.columns[i].text);
      }
      change.identity.resize(written);
    }
  }
  if (has_old) FillBefore(relation, change);
  return Status::Ok();
}

void PgOutputDecoder::FillBefore(const Relation& relation, RowChange& change) {
  // The old tuple holds the key columns, or every column (REPLICA IDENTITY FULL), in order.
  change.before.resize(relation.attributes.size());
  size_t from = 0;
  for (size_t i = 0; i < relation.attributes.size(); ++i) {
    const auto& a = relation.attributes[i];
    Column& c = change.before[i];
    if (from < change.identity.size() && change.identity[from].name == a.name) {
      c = change.identity[from++];
      continue;
    }
    c.name.assign(a.name);
    c.type.assign(a.type);
    c.optional = a.optional;
    c.kind = ValueKind::kNull;
    c.text.clear();
  }
}

Status PgOutputDecoder::DecodeTruncate(Reader& in, Lsn at) {
  const uint32_t count = in.U32();
  in.U8();  // options: CASCADE, RESTART IDENTITY
  if (!in.ok()) return DecodeError(at, "truncated Truncate");
  if (count > in.left() / 4) return DecodeError(at, "Truncate names more relations than it holds");
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t id = in.U32();
    auto found = FindRelation(id, at);
    if (!found.ok()) return found.status();
    truncated_.push_back(id);
  }
  truncate_lsn_ = at;
  pending_ = truncated_.size();
  return Status::Ok();
}

}  // namespace walrelay
