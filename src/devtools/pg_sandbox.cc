#include "devtools/pg_sandbox.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "devtools/child_process.h"
#include "devtools/free_port.h"
#include "pg/pg_handles.h"

namespace walrelay::devtools {
namespace {

namespace fs = std::filesystem;

constexpr int kMinMajorVersion = 15;
constexpr const char* kInstallHint =
    "install postgresql-15 and postgresql-15-wal2json: scripts/install-deps.sh";

bool IsExecutable(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0; }

std::string CacheRoot() {
  if (const char* c = std::getenv("WALRELAY_CACHE_DIR"); c != nullptr && *c != '\0') return c;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/walrelay";
}

// "13.23.0" -> {13, 23, 0}, for picking the newest cached build of a major.
std::vector<int> VersionParts(const std::string& v) {
  std::vector<int> parts;
  std::istringstream in(v);
  for (std::string p; std::getline(in, p, '.');) {
    if (p.empty() ||
        !std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c); }))
      break;
    parts.push_back(std::stoi(p.substr(0, 6)));
  }
  return parts;
}

Result<std::string> FindMajorBinDir(int major) {
  const std::string debian = "/usr/lib/postgresql/" + std::to_string(major) + "/bin";
  if (IsExecutable(fs::path(debian) / "initdb")) return debian;
  const std::string cache = CacheRoot();
  const std::string prefix = "postgres-" + std::to_string(major) + ".";
  std::string best;
  std::vector<int> best_version;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    // A finished fetch leaves "complete"; a staging directory (postgres-N.M.K.XXXXXX) has none.
    if (!fs::exists(entry.path() / "complete") || !IsExecutable(entry.path() / "bin" / "initdb"))
      continue;
    const auto version = VersionParts(name.substr(std::string("postgres-").size()));
    if (best.empty() || version > best_version) {
      best = (entry.path() / "bin").string();
      best_version = version;
    }
  }
  if (best.empty())
    return Status::Precondition("no PostgreSQL " + std::to_string(major) + " binaries in " +
                                debian + " or " + cache + "/" + prefix +
                                "*; run scripts/fetch-postgres.sh " + std::to_string(major));
  return best;
}

Result<std::string> FindBinDir(const PgSandboxOptions& opts) {
  if (!opts.bin_dir.empty()) {
    if (!IsExecutable(fs::path(opts.bin_dir) / "initdb"))
      return Status::Precondition("PgSandboxOptions::bin_dir " + opts.bin_dir +
                                  " has no executable initdb");
    return opts.bin_dir;
  }
  if (opts.major != 0) {
    if (opts.major < 10 || opts.major > 99)
      return Status::Config("PgSandboxOptions::major " + std::to_string(opts.major) +
                            " is not a PostgreSQL major version");
    return FindMajorBinDir(opts.major);
  }
  if (const char* env = std::getenv("WALRELAY_PG_BINDIR"); env != nullptr && *env != '\0') {
    if (!IsExecutable(fs::path(env) / "initdb"))
      return Status::Precondition(std::string("WALRELAY_PG_BINDIR=") + env +
                                  " has no executable initdb; " + kInstallHint);
    return std::string(env);
  }
  int best = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.size() > 4 ||
        !std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    const int major = std::stoi(name);
    if (major >= kMinMajorVersion && major > best && IsExecutable(entry.path() / "bin" / "initdb"))
      best = major;
  }
  if (best < 0)
    return Status::Precondition("no PostgreSQL >= 15 server binaries under /usr/lib/postgresql; " +
                                std::string(kInstallHint));
  return "/usr/lib/postgresql/" + std::to_string(best) + "/bin";
}

// The postgres user must be able to reach its cluster directory: a root-only $TMPDIR (e.g.
// under /root) would make initdb fail with a confusing permission error.
bool UserCanTraverse(const fs::path& dir, uid_t uid, gid_t gid) {
  fs::path p = fs::absolute(dir);
  while (true) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return false;
    const bool ok = (st.st_mode & S_IXOTH) || (st.st_uid == uid && (st.st_mode & S_IXUSR)) ||
                    (st.st_gid == gid && (st.st_mode & S_IXGRP));
    if (!ok) return false;
    if (p == p.root_path()) return true;
    p = p.parent_path();
  }
}

// The fetched builds live in the cache under $HOME, which the postgres OS user usually cannot
// enter (/root is 0700). Their trees are relocatable (paths relative to bin/), so a world-
// readable copy in /tmp serves every sandbox of this machine; it is made once, atomically.
Result<std::string> MirrorForPostgres(const std::string& bin_dir, uid_t uid, gid_t gid) {
  const fs::path tree = fs::path(bin_dir).parent_path();
  const fs::path target = fs::path("/tmp") / ("walrelay-pgbin-" + tree.filename().string());
  const fs::path marker = target / ".walrelay-mirror-of";
  if (ReadFile(marker.string()) == tree.string() && IsExecutable(target / "bin" / "initdb"))
    return (target / "bin").string();
  std::string tmpl = target.string() + ".XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    return Status::Internal("cannot create " + tmpl + ": " + std::strerror(errno));
  const fs::path staging = buf.data();
  std::error_code ec;
  fs::copy(tree, staging, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (!ec) fs::permissions(staging, fs::perms(0755), ec);
  if (!ec) {
    std::ofstream out(staging / marker.filename());
    out << tree.string();
    if (!out) ec = std::make_error_code(std::errc::io_error);
  }
  if (ec) {
    fs::remove_all(staging, ec);
    return Status::Internal("cannot copy " + tree.string() + " to " + staging.string());
  }
  if (!UserCanTraverse(staging / "bin", uid, gid)) {
    fs::remove_all(staging, ec);
    return Status::Internal("copied " + tree.string() + " but the postgres user cannot read it");
  }
  if (::rename(staging.c_str(), target.c_str()) != 0) {
    // Another process finished the same mirror first (or a stale one is in the way).
    fs::remove_all(staging, ec);
    if (ReadFile(marker.string()) != tree.string())
      return Status::Internal("cannot install " + target.string() +
                              " (remove it): " + std::strerror(errno));
  }
  return (target / "bin").string();
}

// A new walrelay-pg-* directory under $TMPDIR or /tmp that the cluster owner can reach, with
// room for the unix socket path (sun_path is short).
Result<std::string> MakeBaseDir(bool as_root, uid_t pg_uid, gid_t pg_gid) {
  constexpr size_t kSocketSuffix = sizeof("/.s.PGSQL.65535");
  std::vector<std::string> parents;
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') parents.emplace_back(t);
  parents.emplace_back("/tmp");
  for (const auto& parent : parents) {
    std::error_code ec;
    // Absolute, because the path is matched against the postmaster's command line.
    const fs::path abs_parent = fs::absolute(parent, ec);
    if (ec) continue;
    std::string tmpl = (abs_parent / "walrelay-pg-XXXXXX").string();
    if (tmpl.size() + kSocketSuffix > sizeof(sockaddr_un::sun_path)) continue;
    if (as_root && !UserCanTraverse(abs_parent, pg_uid, pg_gid)) continue;
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) continue;
    std::string base = buf.data();
    if (as_root && ::chown(base.c_str(), pg_uid, pg_gid) != 0) {
      const std::string err = std::strerror(errno);
      fs::remove_all(base, ec);
      return Status::Internal("chown " + base + " to postgres: " + err);
    }
    return base;
  }
  return Status::Internal("cannot create a temporary directory for the sandbox cluster under " +
                          parents.front() + (parents.size() > 1 ? " or /tmp" : ""));
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string ConfQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

std::string Tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The postmaster is not our child (pg_ctl daemonises it), so liveness is probed by signal 0.
// A zombie counts as gone: it only lingers when this process is the reaper (PID 1 in a
// container) and it holds no resources.
bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  if (close_paren != std::string::npos && close_paren + 2 < stat.size() &&
      stat[close_paren + 2] == 'Z')
    return false;
  return true;
}

// The pid from postmaster.pid, if that process is alive and is this cluster's postmaster. A
// stale pid file (after a kill) may name a pid the kernel has since reused, which we must not
// signal; pg_ctl passes -D <data_dir> to the postmaster, so its command line identifies it.
pid_t LivePostmasterPid(const std::string& data_dir) {
  std::istringstream in(ReadFile(data_dir + "/postmaster.pid"));
  long pid = 0;
  if (!(in >> pid) || !ProcessAlive(static_cast<pid_t>(pid))) return 0;
  std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  if (cmdline.find(data_dir) == std::string::npos) return 0;
  return static_cast<pid_t>(pid);
}

std::string SqlForMessage(const std::string& sql) {
  return sql.size() <= 200 ? sql : sql.substr(0, 200) + "...";
}

void IgnoreNotice(void*, const char*) {}

// Fresh connection per call keeps the sandbox free of shared connection state, so concurrent
// callers and server restarts need no coordination.
Result<PgConnPtr> Connect(const std::string& conninfo) {
  PgConnPtr conn(PQconnectdb((conninfo + " connect_timeout=10").c_str()));
  if (!conn) return Status::Connection("out of memory connecting to PostgreSQL");
  if (PQstatus(conn.get()) != CONNECTION_OK)
    return Status::Connection("cannot connect to sandbox PostgreSQL (" + conninfo +
                              "): " + Trim(PQerrorMessage(conn.get())));
  // NOTICEs ("table does not exist, skipping") would otherwise go to stderr of every test.
  PQsetNoticeProcessor(conn.get(), IgnoreNotice, nullptr);
  return conn;
}

Result<PgResultPtr> Run(const std::string& conninfo, const std::string& sql) {
  auto conn = Connect(conninfo);
  if (!conn.ok()) return conn.status();
  PgResultPtr res(PQexec(conn->get(), sql.c_str()));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    const std::string err = res ? PQresultErrorMessage(res.get()) : PQerrorMessage(conn->get());
    return Status::Internal("SQL failed: " + SqlForMessage(sql) + ": " + Trim(err));
  }
  return res;
}

}  // namespace

Result<std::unique_ptr<PgSandbox>> PgSandbox::Start(const PgSandboxOptions& opts) {
  for (const auto& s : opts.extra_settings) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::Config("PgSandbox extra setting '" + s + "' is not name=value");
  }
  auto bin_dir = FindBinDir(opts);
  if (!bin_dir.ok()) return bin_dir.status();

  const bool as_root = ::geteuid() == 0;
  uid_t pg_uid = 0;
  gid_t pg_gid = 0;
  if (as_root) {
    const passwd* pw = ::getpwnam("postgres");
    if (pw == nullptr)
      return Status::Precondition(
          "running as root, but there is no 'postgres' OS user to own the sandbox cluster; " +
          std::string(kInstallHint));
    pg_uid = pw->pw_uid;
    pg_gid = pw->pw_gid;
    if (!UserCanTraverse(*bin_dir, pg_uid, pg_gid)) {
      bin_dir = MirrorForPostgres(*bin_dir, pg_uid, pg_gid);
      if (!bin_dir.ok()) return bin_dir.status();
    }
  }

  auto base = MakeBaseDir(as_root, pg_uid, pg_gid);
  if (!base.ok()) return base.status();

  // From here on the destructor owns cleanup of the directory and any server.
  std::unique_ptr<PgSandbox> sb(new PgSandbox());
  sb->bin_dir_ = *bin_dir;
  sb->base_dir_ = *base;
  sb->data_dir_ = *base + "/data";
  sb->log_path_ = *base + "/server.log";
  sb->run_as_postgres_ = as_root;
  sb->pg_uid_ = pg_uid;
  sb->pg_gid_ = pg_gid;
  sb->extra_settings_ = opts.extra_settings;

  auto init = sb->RunTool("initdb",
                          {"-D", sb->data_dir_, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                           "--locale=C", "--no-sync"},
                          "initdb.log", 120);
  if (!init.ok()) return init.status();
  if (init->exit_code != 0)
    return Status::Internal("initdb failed (exit " + std::to_string(init->exit_code) +
                            "): " + Tail(init->output, 2000));

  // Debian's builds serve wal2json clients; failing here names the missing package, where
  // slot creation would only say "could not access file". The fetched builds have no
  // pg_config (and no wal2json): they serve pgoutput only.
  if (IsExecutable(fs::path(sb->bin_dir_) / "pg_config")) {
    auto libdir = sb->RunTool("pg_config", {"--pkglibdir"}, "pg_config.out", 30);
    if (libdir.ok() && libdir->exit_code == 0) {
      const std::string dir = Trim(libdir->output);
      if (!dir.empty() && !fs::exists(fs::path(dir) / "wal2json.so"))
        return Status::Precondition("wal2json.so not found in " + dir + "; " + kInstallHint);
      sb->has_wal2json_ = !dir.empty();
    }
  }

  auto port = PickFreePort();
  if (!port.ok()) return port.status();
  sb->port_ = *port;
  WALRELAY_RETURN_IF_ERROR(sb->ConfigureCluster());
  if (!opts.log_prefix.empty()) {
    std::ofstream conf(sb->data_dir_ + "/postgresql.conf", std::ios::app);
    conf << "log_line_prefix = " << ConfQuote(opts.log_prefix) << "\n";
    if (!conf) return Status::Internal("cannot write " + sb->data_dir_ + "/postgresql.conf");
  }
  WALRELAY_RETURN_IF_ERROR(sb->StartServerRetryingPort());
  WALRELAY_RETURN_IF_ERROR(sb->ReadMajorVersion());
  return sb;
}

Status PgSandbox::StartServerRetryingPort() {
  Status started;
  for (int attempt = 0;; ++attempt) {
    const size_t log_offset = ReadFile(log_path_).size();
    started = StartServer();
    if (started.ok() || attempt == 3) break;
    // Another process can grab the port between PickFreePort and the server's bind.
    const std::string log = ReadFile(log_path_);
    if (log.size() <= log_offset || log.find("could not bind", log_offset) == std::string::npos)
      break;
    auto retry_port = PickFreePort();
    if (!retry_port.ok()) return retry_port.status();
    port_ = *retry_port;
    std::ofstream conf(data_dir_ + "/postgresql.conf", std::ios::app);
    conf << "port = " << port_ << "\n";  // later lines win
    if (!conf) return Status::Internal("cannot write " + data_dir_ + "/postgresql.conf");
  }
  return started;
}

Status PgSandbox::ReadMajorVersion() {
  auto v = QueryValue("SHOW server_version_num");
  if (!v.ok()) return v.status();
  try {
    major_version_ = std::stoi(*v) / 10000;
  } catch (const std::exception&) {
    return Status::Internal("unexpected server_version_num '" + *v + "'");
  }
  return Status::Ok();
}

Status PgSandbox::ConfigureCluster() {
  const std::string conf_path = data_dir_ + "/postgresql.conf";
  std::string conf = "\n# --- walrelay PgSandbox ---\n";
  conf += "listen_addresses = '127.0.0.1'\n";
  conf += "port = " + std::to_string(port_) + "\n";
  conf += "unix_socket_directories = " + ConfQuote(base_dir_) + "\n";
  conf += "wal_level = logical\n";
  conf += "max_replication_slots = 20\n";
  conf += "max_wal_senders = 20\n";
  conf += "fsync = off\n";
  conf += "full_page_writes = off\n";

  // Setting an unknown GUC in postgresql.conf stops the server from starting, so only builds
  // that have output_plugin_libraries get it. `postgres -C` reads the setting without starting.
  auto probe =
      RunTool("postgres", {"-C", "output_plugin_libraries", "-D", data_dir_}, "probe.out", 60);
  if (!probe.ok()) return probe.status();
  if (probe->exit_code == 0) {
    std::string value;
    std::istringstream lines(probe->output);
    for (std::string line; std::getline(lines, line);)
      if (!Trim(line).empty()) value = Trim(line);
    if (value.find("wal2json") == std::string::npos) {
      value = value.empty() ? "wal2json" : value + ", wal2json";
      conf += "output_plugin_libraries = " + ConfQuote(value) + "\n";
    }
  } else if (probe->output.find("unrecognized configuration parameter") == std::string::npos) {
    return Status::Internal("postgres -C output_plugin_libraries failed (exit " +
                            std::to_string(probe->exit_code) + "): " + Tail(probe->output, 1000));
  }

  {
    std::ofstream out(conf_path, std::ios::app);
    out << conf;
    if (!out) return Status::Internal("cannot write " + conf_path);
  }

  // initdb -A trust writes these, but walrelay's replication connection depends on them, so
  // make sure instead of assuming.
  const std::string hba_path = data_dir_ + "/pg_hba.conf";
  bool have_host = false;
  bool have_replication = false;
  std::istringstream hba(ReadFile(hba_path));
  for (std::string line; std::getline(hba, line);) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::vector<std::string> w{std::istream_iterator<std::string>(words),
                               std::istream_iterator<std::string>()};
    if (w.size() != 5 || w[0] != "host" || w[2] != "all" || w[3] != "127.0.0.1/32" ||
        w[4] != "trust")
      continue;
    if (w[1] == "all") have_host = true;
    if (w[1] == "replication") have_replication = true;
  }
  if (!have_host || !have_replication) {
    std::ofstream out(hba_path, std::ios::app);
    if (!have_host) out << "host all all 127.0.0.1/32 trust\n";
    if (!have_replication) out << "host replication all 127.0.0.1/32 trust\n";
    if (!out) return Status::Internal("cannot write " + hba_path);
  }
  return Status::Ok();
}

Result<PgSandbox::CommandResult> PgSandbox::RunTool(const std::string& program,
                                                    const std::vector<std::string>& args,
                                                    const std::string& log_name,
                                                    int timeout_seconds) const {
  std::vector<std::string> argv;
  if (run_as_postgres_) argv = {"runuser", "-u", "postgres", "--"};
  argv.push_back(bin_dir_ + "/" + program);
  argv.insert(argv.end(), args.begin(), args.end());

  const std::string out_path = base_dir_ + "/" + log_name;
  std::error_code ec;
  fs::remove(out_path, ec);
  // Started in base_dir_ because the postgres user may not be able to read our working
  // directory (e.g. /root), which makes initdb fail to locate itself.
  auto child = ChildProcess::Spawn(argv, out_path, {}, base_dir_);
  if (!child.ok()) return child.status();
  auto code = (*child)->Wait(std::chrono::seconds(timeout_seconds));
  if (!code.ok())
    return Status::Internal(program + " did not finish within " + std::to_string(timeout_seconds) +
                            " s: " + code.status().message());
  return CommandResult{*code, ReadFile(out_path)};
}

Status PgSandbox::StartServer() {
  std::string server_opts;
  for (const auto& s : extra_settings_) server_opts += " -c " + ShellQuote(s);
  std::vector<std::string> args = {"-D", data_dir_, "-l", log_path_, "-w", "-t", "60"};
  if (!server_opts.empty()) {
    // pg_ctl hands -o to /bin/sh, hence the shell quoting above.
    args.push_back("-o");
    args.push_back(server_opts);
  }
  args.push_back("start");
  auto r = RunTool("pg_ctl", args, "pg_ctl.log", 90);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    // A half-started postmaster (timeout) must not survive the failed start.
    KillPostmaster();
    return Status::Internal("pg_ctl start failed (exit " + std::to_string(r->exit_code) +
                            "): " + Trim(Tail(r->output, 1000)) + "\nserver log " + log_path_ +
                            ":\n" + Tail(ReadFile(log_path_), 2000));
  }
  running_ = true;
  return Status::Ok();
}

Status PgSandbox::Stop() {
  if (!running_) return Status::Ok();
  auto r = RunTool("pg_ctl", {"-D", data_dir_, "-m", "fast", "-w", "-t", "60", "stop"},
                   "pg_ctl.log", 90);
  running_ = false;
  if (!r.ok() || r->exit_code != 0) {
    const std::string why = r.ok() ? Trim(r->output) : r.status().message();
    KillPostmaster();
    return Status::Internal("pg_ctl stop failed (postmaster killed instead): " + why);
  }
  return Status::Ok();
}

Status PgSandbox::Restart() {
  WALRELAY_RETURN_IF_ERROR(Stop());
  return StartServer();
}

Status PgSandbox::AddHbaLines(const std::vector<std::string>& lines) {
  for (const auto& line : lines) {
    if (line.find_first_of("\r\n") != std::string::npos)
      return Status::Config("PgSandbox hba line '" + line + "' spans several lines");
  }
  const std::string path = data_dir_ + "/pg_hba.conf";
  const std::string current = ReadFile(path);
  // initdb always writes entries; an empty read means the file is gone or unreadable, and
  // rewriting it from `lines` alone would silently drop the defaults.
  if (current.empty()) return Status::Internal("cannot read " + path);
  std::string text = "# --- walrelay PgSandbox::AddHbaLines ---\n";
  for (const auto& line : lines) text += line + "\n";
  std::ofstream out(path, std::ios::trunc);
  out << text << current;
  out.flush();
  if (!out) return Status::Internal("cannot write " + path);
  return Status::Ok();
}

namespace {

// Files and directories an online copy must not take from a running primary (PostgreSQL's
// "Making a Base Backup Using the Low Level API"): runtime state, and the primary's WAL and
// slots, which the standby gets by streaming and by slot synchronization instead.
bool SkipFile(const std::string& rel) {
  static const char* const kSkip[] = {"postmaster.pid", "postmaster.opts", "backup_label",
                                      "tablespace_map", "standby.signal",  "recovery.signal"};
  for (const char* k : kSkip)
    if (rel == k) return true;
  const std::string name = fs::path(rel).filename().string();
  return name == "pg_internal.init" || name.rfind("pgsql_tmp", 0) == 0;
}

bool EmptyDirInCopy(const std::string& rel, bool copy_wal) {
  static const char* const kEmpty[] = {"pg_replslot", "pg_stat_tmp",  "pg_dynshmem", "pg_notify",
                                       "pg_serial",   "pg_snapshots", "pg_subtrans"};
  for (const char* k : kEmpty)
    if (rel == k) return true;
  return rel == "pg_wal" && !copy_wal;
}

}  // namespace

// copy_wal: a cold copy takes the WAL up to the primary's shutdown checkpoint along; an online
// copy leaves it out and streams everything from the backup's start instead.
Status PgSandbox::CopyDataDirFrom(const PgSandbox& primary, bool copy_wal) {
  const fs::path src = primary.data_dir_;
  const fs::path dst = data_dir_;
  std::error_code ec;
  fs::create_directory(dst, ec);
  if (ec) return Status::Internal("cannot create " + dst.string() + ": " + ec.message());
  fs::permissions(dst, fs::perms(0700), ec);
  for (auto it = fs::recursive_directory_iterator(src, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const fs::path rel = fs::relative(it->path(), src);
    const std::string r = rel.string();
    std::error_code fec;
    if (it->is_directory(fec)) {
      fs::create_directories(dst / rel, fec);
      if (fec) return Status::Internal("cannot create " + (dst / rel).string());
      if (EmptyDirInCopy(r, copy_wal)) it.disable_recursion_pending();
      continue;
    }
    if (SkipFile(r)) continue;
    fs::copy_file(it->path(), dst / rel, fs::copy_options::overwrite_existing, fec);
    // A running primary removes files while we copy (temporary files, recycled WAL); WAL
    // replay from the backup's start makes up for any such race.
    if (fec && fs::exists(it->path())) {
      return Status::Internal("cannot copy " + it->path().string() + ": " + fec.message());
    }
  }
  if (ec) return Status::Internal("cannot read " + src.string() + ": " + ec.message());
  fs::create_directories(dst / "pg_wal" / "archive_status", ec);
  {
    std::ofstream sig(dst / "standby.signal");
    if (!sig) return Status::Internal("cannot write " + (dst / "standby.signal").string());
  }
  if (run_as_postgres_) {
    for (auto it = fs::recursive_directory_iterator(base_dir_, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      if (::lchown(it->path().c_str(), pg_uid_, pg_gid_) != 0)
        return Status::Internal("chown " + it->path().string() + ": " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<PgSandbox>> PgSandbox::StartStandby(const PgStandbyOptions& opts) {
  if (!running_) return Status::Precondition("StartStandby needs a running primary sandbox");
  if (opts.slot_name.empty() || opts.slot_name.find_first_not_of(
                                    "abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
    return Status::Config("PgStandbyOptions::slot_name '" + opts.slot_name +
                          "' must be lower-case letters, digits and '_'");
  for (const auto& s : opts.extra_settings) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::Config("PgStandbyOptions extra setting '" + s + "' is not name=value");
  }
  // Reserved now, so the WAL from before the copy stays until the standby has streamed it.
  WALRELAY_RETURN_IF_ERROR(Exec("SELECT pg_create_physical_replication_slot('" + opts.slot_name +
                                "', true) WHERE NOT EXISTS "
                                "(SELECT 1 FROM pg_replication_slots WHERE slot_name = '" +
                                opts.slot_name + "')"));

  auto base = MakeBaseDir(run_as_postgres_, pg_uid_, pg_gid_);
  if (!base.ok()) return base.status();
  std::unique_ptr<PgSandbox> sb(new PgSandbox());
  sb->bin_dir_ = bin_dir_;
  sb->base_dir_ = *base;
  sb->data_dir_ = *base + "/data";
  sb->log_path_ = *base + "/server.log";
  sb->run_as_postgres_ = run_as_postgres_;
  sb->pg_uid_ = pg_uid_;
  sb->pg_gid_ = pg_gid_;
  sb->standby_ = true;
  sb->has_wal2json_ = has_wal2json_;
  sb->extra_settings_ = extra_settings_;
  sb->extra_settings_.insert(sb->extra_settings_.end(), opts.extra_settings.begin(),
                             opts.extra_settings.end());

  if (opts.cold_copy) {
    WALRELAY_RETURN_IF_ERROR(Stop());
    const Status copied = sb->CopyDataDirFrom(*this, true);
    // The primary comes back whatever the copy did: the caller's test goes on with it.
    const Status restarted = StartServer();
    WALRELAY_RETURN_IF_ERROR(copied);
    WALRELAY_RETURN_IF_ERROR(restarted);
  } else {
    // The backup lasts as long as this session: a non-exclusive backup is aborted when the
    // connection that started it closes.
    auto conn = Connect(ConnInfo());
    if (!conn.ok()) return conn.status();
    const bool new_api = major_version_ >= 15;
    const std::string start_sql = new_api
                                      ? "SELECT pg_backup_start('walrelay standby', true)"
                                      : "SELECT pg_start_backup('walrelay standby', true, false)";
    const std::string stop_sql = new_api ? "SELECT labelfile FROM pg_backup_stop(false)"
                                         : "SELECT labelfile FROM pg_stop_backup(false, false)";
    PgResultPtr started(PQexec(conn->get(), start_sql.c_str()));
    if (!started || PQresultStatus(started.get()) != PGRES_TUPLES_OK)
      return Status::Internal(start_sql + " failed: " + Trim(PQerrorMessage(conn->get())));
    WALRELAY_RETURN_IF_ERROR(sb->CopyDataDirFrom(*this, false));
    PgResultPtr stopped(PQexec(conn->get(), stop_sql.c_str()));
    if (!stopped || PQresultStatus(stopped.get()) != PGRES_TUPLES_OK ||
        PQntuples(stopped.get()) != 1)
      return Status::Internal(stop_sql + " failed: " + Trim(PQerrorMessage(conn->get())));
    const std::string label(PQgetvalue(stopped.get(), 0, 0), PQgetlength(stopped.get(), 0, 0));
    const std::string label_path = sb->data_dir_ + "/backup_label";
    std::ofstream out(label_path, std::ios::trunc);
    out << label;
    out.close();
    if (!out) return Status::Internal("cannot write " + label_path);
    if (run_as_postgres_ && ::chown(label_path.c_str(), pg_uid_, pg_gid_) != 0)
      return Status::Internal("chown " + label_path + ": " + std::strerror(errno));
  }

  auto port = PickFreePort();
  if (!port.ok()) return port.status();
  sb->port_ = *port;
  {
    std::string conf = "\n# --- walrelay PgSandbox standby ---\n";
    conf += "port = " + std::to_string(sb->port_) + "\n";
    conf += "unix_socket_directories = " + ConfQuote(sb->base_dir_) + "\n";
    conf += "hot_standby = on\n";
    conf += "primary_conninfo = " +
            ConfQuote(ConnInfo("postgres") + " application_name=" + opts.slot_name) + "\n";
    conf += "primary_slot_name = " + ConfQuote(opts.slot_name) + "\n";
    std::ofstream out(sb->data_dir_ + "/postgresql.conf", std::ios::app);
    out << conf;
    if (!out) return Status::Internal("cannot write " + sb->data_dir_ + "/postgresql.conf");
  }
  WALRELAY_RETURN_IF_ERROR(sb->StartServerRetryingPort());
  WALRELAY_RETURN_IF_ERROR(sb->ReadMajorVersion());

  if (opts.wait_streaming) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    const std::string sql =
        "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND "
        "application_name = '" +
        opts.slot_name + "'";
    while (true) {
      auto n = QueryValue(sql);
      if (n.ok() && *n != "0") break;
      if (std::chrono::steady_clock::now() > deadline)
        return Status::Internal("standby on port " + std::to_string(sb->port_) +
                                " is not streaming from the primary after 60 s; its log " +
                                sb->log_path_ + ":\n" + Tail(ReadFile(sb->log_path_), 2000));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return sb;
}

Status PgSandbox::Promote() {
  if (!standby_) return Status::Precondition("Promote: this sandbox is not a standby");
  auto r = RunTool("pg_ctl", {"-D", data_dir_, "-w", "-t", "60", "promote"}, "pg_ctl.log", 90);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0)
    return Status::Internal("pg_ctl promote failed (exit " + std::to_string(r->exit_code) +
                            "): " + Trim(Tail(r->output, 1000)) + "\nserver log " + log_path_ +
                            ":\n" + Tail(ReadFile(log_path_), 2000));
  standby_ = false;
  return Status::Ok();
}

Status PgSandbox::KillServer() {
  const pid_t pm = LivePostmasterPid(data_dir_);
  running_ = false;
  if (pm == 0) return Status::Precondition("KillServer: no live postmaster for " + data_dir_);
  // Stopped first so it forks no new backend while its children are collected.
  ::kill(pm, SIGSTOP);
  std::vector<pid_t> victims;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() ||
        !std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    const std::string stat = ReadFile(entry.path().string() + "/stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    std::string state;
    long ppid = 0;
    if ((rest >> state >> ppid) && ppid == pm) victims.push_back(std::stoi(name));
  }
  for (pid_t pid : victims) ::kill(pid, SIGKILL);
  ::kill(pm, SIGKILL);
  victims.push_back(pm);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : victims) {
    while (ProcessAlive(pid) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (ProcessAlive(pid))
      return Status::Internal("KillServer: process " + std::to_string(pid) + " survived SIGKILL");
  }
  // The dead postmaster may linger as a zombie until init reaps it, and a new postmaster takes
  // lock files naming a zombie for a live server. The server is known dead: drop its pid file
  // and socket lock files.
  std::error_code rm_ec;
  fs::remove(data_dir_ + "/postmaster.pid", rm_ec);
  for (const auto& entry : fs::directory_iterator(base_dir_, rm_ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".s.PGSQL.", 0) == 0) fs::remove(entry.path(), rm_ec);
  }
  return Status::Ok();
}

Result<int> PgSandbox::Timeline() const {
  auto v = QueryValue(
      "SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint()) "
      "ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END");
  if (!v.ok()) return v.status();
  try {
    return std::stoi(*v);
  } catch (const std::exception&) {
    return Status::Internal("unexpected timeline '" + *v + "'");
  }
}

bool PgSandbox::running() const { return running_ && LivePostmasterPid(data_dir_) != 0; }

void PgSandbox::KillPostmaster() {
  const pid_t pid = LivePostmasterPid(data_dir_);
  if (pid == 0) return;
  ::kill(pid, SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ProcessAlive(pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

PgSandbox::~PgSandbox() {
  // Runs during exception unwinding too, so nothing here may throw.
  try {
    if (!data_dir_.empty() && LivePostmasterPid(data_dir_) != 0) {
      auto r = RunTool("pg_ctl", {"-D", data_dir_, "-m", "immediate", "-w", "-t", "30", "stop"},
                       "pg_ctl.log", 45);
      (void)r;
      KillPostmaster();  // no-op when pg_ctl succeeded
    }
  } catch (...) {
    KillPostmaster();
  }
  if (!base_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(base_dir_, ec);
  }
}

std::string PgSandbox::ConnInfo(const std::string& dbname) const {
  return "host=" + host_ + " port=" + std::to_string(port_) + " user=postgres dbname=" + dbname;
}

Status PgSandbox::Exec(const std::string& sql) const {
  auto r = Run(ConnInfo(), sql);
  return r.ok() ? Status::Ok() : r.status();
}

Result<std::vector<PgSandbox::Row>> PgSandbox::Query(const std::string& sql) const {
  auto r = Run(ConnInfo(), sql);
  if (!r.ok()) return r.status();
  PGresult* res = r->get();
  std::vector<Row> rows;
  const int nrows = PQntuples(res);
  const int ncols = PQnfields(res);
  rows.reserve(nrows);
  for (int i = 0; i < nrows; ++i) {
    Row row;
    row.reserve(ncols);
    for (int j = 0; j < ncols; ++j) {
      if (PQgetisnull(res, i, j)) row.emplace_back(std::nullopt);
      else row.emplace_back(std::string(PQgetvalue(res, i, j), PQgetlength(res, i, j)));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::string> PgSandbox::QueryValue(const std::string& sql) const {
  auto rows = Query(sql);
  if (!rows.ok()) return rows.status();
  if (rows->empty() || rows->front().empty())
    return Status::Internal("query returned no rows: " + SqlForMessage(sql));
  if (!rows->front().front()) return Status::Internal("query returned NULL: " + SqlForMessage(sql));
  return *rows->front().front();
}

}  // namespace walrelay::devtools
