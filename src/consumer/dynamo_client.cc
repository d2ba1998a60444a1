// DynamoClient over Boost.Beast (see dynamo_client.h). Beast's operations are run
// asynchronously on a private io_context so the tcp_stream's deadline bounds each step:
// blocking socket calls would have no timeout.
#include "consumer/dynamo_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <cstdio>
#include <ctime>
#include <optional>
#include <random>
#include <thread>

#include "consumer/aws_http.h"

namespace walrelay::consumer {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

Result<DynamoEndpoint> ParseDynamoEndpoint(const std::string& url) {
  auto parsed = ParseHttpUrl(url);
  if (!parsed.ok())
    return Status::Config("DynamoStoreOptions.endpoint: " + parsed.status().message());
  // The API is served at "/": a path would be signed and sent nowhere DynamoDB answers.
  if (parsed->target.find_first_not_of('/') != std::string::npos)
    return Status::Config("DynamoStoreOptions.endpoint '" + url + "' must be scheme://host[:port]");
  return DynamoEndpoint{parsed->tls, parsed->host, parsed->port};
}

namespace {

std::string AmzDate(std::chrono::system_clock::time_point at) {
  const std::time_t now = std::chrono::system_clock::to_time_t(at);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

bool Retriable(const DynamoReply& r) {
  return r.http_status >= 500 || r.error_type == "ProvisionedThroughputExceededException" ||
         r.error_type == "ThrottlingException" || r.error_type == "RequestLimitExceeded";
}

}  // namespace

bool IsClockSkewRefusal(const std::string& error_type, const std::string& error_message) {
  if (error_type == "RequestTimeTooSkewed" || error_type == "RequestExpired" ||
      error_type == "RequestInTheFuture")
    return true;
  return error_type == "InvalidSignatureException" &&
         (error_message.find("Signature expired") != std::string::npos ||
          error_message.find("Signature not yet current") != std::string::npos);
}

bool IsCredentialRefusal(const std::string& error_type) {
  return error_type == "ExpiredTokenException" || error_type == "ExpiredToken" ||
         error_type == "UnrecognizedClientException";
}

std::optional<std::chrono::milliseconds> ClockOffsetFromDate(
    const std::string& date_header, std::chrono::system_clock::time_point local_now) {
  // RFC 7231's IMF-fixdate, the only form a server may send: parsed by hand, strptime's month
  // names depend on the locale.
  char weekday[4] = {}, month_name[4] = {}, zone[4] = {};
  int day = 0, year = 0, hour = 0, minute = 0, second = 0;
  if (std::sscanf(date_header.c_str(), "%3s, %d %3s %d %d:%d:%d %3s", weekday, &day, month_name,
                  &year, &hour, &minute, &second, zone) != 8 ||
      std::string(zone) != "GMT")
    return std::nullopt;
  static const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  int month = -1;
  for (int i = 0; i < 12; ++i)
    if (std::string(month_name) == kMonths[i]) month = i;
  if (month < 0 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60 || year < 1970)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const auto server = std::chrono::system_clock::from_time_t(timegm(&tm));
  return std::chrono::duration_cast<std::chrono::milliseconds>(server - local_now);
}

struct DynamoClient::Impl {
  Options options;
  net::io_context ioc;
  std::optional<ssl::context> tls_context;
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  std::string host_header;

  beast::tcp_stream& Lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  bool Open() const { return plain != nullptr || tls != nullptr; }
  void Close() {
    beast::error_code ignored;
    if (plain) plain->socket().shutdown(tcp::socket::shutdown_both, ignored);
    if (tls) beast::get_lowest_layer(*tls).socket().shutdown(tcp::socket::shutdown_both, ignored);
    plain.reset();
    tls.reset();
    buffer.clear();
  }

  // Runs the queued operations until they finish; the stream's deadline ends them otherwise.
  void RunIo() {
    ioc.restart();
    ioc.run();
  }

  Status Connect() {
    Close();
    beast::error_code ec;
    auto addresses = ResolveWithin(options.endpoint.host, options.endpoint.port, options.timeout);
    if (!addresses.ok()) return addresses.status().WithContext(Where());
    auto stream = std::make_unique<beast::tcp_stream>(ioc);
    stream->expires_after(options.timeout);
    stream->async_connect(*addresses, [&ec](beast::error_code e, const tcp::endpoint&) { ec = e; });
    RunIo();
    if (ec) return Status::Connection("cannot connect to " + Where() + ": " + ec.message());
    stream->socket().set_option(tcp::no_delay(true), ec);
    if (!options.endpoint.tls) {
      plain = std::move(stream);
      return Status::Ok();
    }
    if (!tls_context) {
      tls_context.emplace(ssl::context::tls_client);
      tls_context->set_default_verify_paths(ec);
      tls_context->set_verify_mode(ssl::verify_peer);
    }
    auto secure =
        std::make_unique<beast::ssl_stream<beast::tcp_stream>>(std::move(*stream), *tls_context);
    if (!SSL_set_tlsext_host_name(secure->native_handle(), options.endpoint.host.c_str()))
      return Status::Connection("cannot set the TLS server name for " + Where());
    secure->set_verify_callback(ssl::host_name_verification(options.endpoint.host));
    beast::get_lowest_layer(*secure).expires_after(options.timeout);
    secure->async_handshake(ssl::stream_base::client, [&ec](beast::error_code e) { ec = e; });
    RunIo();
    if (ec) return Status::Connection("TLS handshake with " + Where() + " failed: " + ec.message());
    tls = std::move(secure);
    return Status::Ok();
  }

  template <class Stream>
  beast::error_code Exchange(Stream& stream, http::request<http::string_body>& request,
                             http::response<http::string_body>& response) {
    beast::error_code ec;
    Lowest().expires_after(options.timeout);
    http::async_write(stream, request, [&](beast::error_code e, size_t) {
      ec = e;
      if (e) return;
      Lowest().expires_after(options.timeout);
      http::async_read(stream, buffer, response, [&ec](beast::error_code e2, size_t) { ec = e2; });
    });
    RunIo();
    return ec;
  }

  // One request and its reply. A connection the server closed while it was idle fails on its
  // first use: that request is sent once more on a new connection.
  Result<DynamoReply> Send(const std::string& operation, const std::string& json) {
    for (int round = 0; round < 2; ++round) {
      AwsCredentials credentials = options.credentials;
      if (options.credential_provider) {
        // Mid-run, a source that cannot deliver (a rotating token file, an endpoint down) is
        // waited out like an unreachable store.
        auto current = options.credential_provider->Current();
        if (!current.ok()) return Status::Connection(current.status().message());
        credentials = std::move(*current);
      }
      const bool reused = Open();
      if (!reused) WALRELAY_RETURN_IF_ERROR(Connect());
      http::request<http::string_body> request{http::verb::post, "/", 11};
      const std::string date = AmzDate(std::chrono::system_clock::now() +
                                       std::chrono::milliseconds(options.clock_offset_ms->load()));
      const std::string target = "DynamoDB_20120810." + operation;
      SigV4Request sig;
      sig.payload = json;
      sig.headers = {{"host", host_header},
                     {"x-amz-date", date},
                     {"x-amz-target", target},
                     {"content-type", "application/x-amz-json-1.0"}};
      if (!credentials.session_token.empty())
        sig.headers.emplace_back("x-amz-security-token", credentials.session_token);
      const SigV4Result signature = SignV4(sig, credentials, options.region, "dynamodb", date);
      for (const auto& [name, value] : sig.headers) request.set(name, value);
      request.set(http::field::authorization, signature.authorization);
      request.keep_alive(true);
      request.body() = json;
      request.prepare_payload();
      http::response<http::string_body> response;
      response.body().reserve(512);
      const beast::error_code ec =
          tls ? Exchange(*tls, request, response) : Exchange(*plain, request, response);
      if (ec) {
        Close();
        if (reused && round == 0 && ec != beast::error::timeout) continue;
        return Status::Connection(operation + " on " + Where() + " failed: " + ec.message());
      }
      if (!response.keep_alive()) Close();
      DynamoReply reply;
      reply.http_status = response.result_int();
      if (auto d = response.find(http::field::date); d != response.end())
        reply.date = std::string(d->value());
      const std::string& body = response.body();
      if (body.empty()) {
        reply.body.SetObject();
      } else if (reply.body.Parse(body.data(), body.size()).HasParseError() ||
                 !reply.body.IsObject()) {
        return Status::Protocol(Where() + " answered " + operation + " with HTTP " +
                                std::to_string(reply.http_status) + " and no JSON object");
      }
      if (reply.http_status / 100 != 2) {
        std::string type = "HTTP " + std::to_string(reply.http_status);
        if (const rapidjson::Value* t = JsonMember(reply.body, "__type"); t && t->IsString())
          type = t->GetString();
        reply.error_type = type.substr(type.rfind('#') + 1);
        for (const char* field : {"message", "Message"})
          if (const rapidjson::Value* m = JsonMember(reply.body, field); m && m->IsString())
            reply.error_message = m->GetString();
      }
      return reply;
    }
    return Status::Internal("unreachable");
  }

  std::string Where() const {
    return std::string("DynamoDB at ") + (options.endpoint.tls ? "https://" : "http://") +
           options.endpoint.host + ":" + options.endpoint.port;
  }
};

DynamoClient::DynamoClient(Options options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  if (!impl_->options.clock_offset_ms)
    impl_->options.clock_offset_ms = std::make_shared<std::atomic<int64_t>>(0);
  const DynamoEndpoint& ep = impl_->options.endpoint;
  const bool default_port = ep.port == (ep.tls ? "443" : "80");
  impl_->host_header = default_port ? ep.host : ep.host + ":" + ep.port;
}

DynamoClient::~DynamoClient() { impl_->Close(); }

std::string DynamoClient::where() const { return impl_->Where(); }

Result<DynamoReply> DynamoClient::Call(const std::string& operation, const std::string& json) {
  const auto deadline = std::chrono::steady_clock::now() + impl_->options.timeout;
  std::chrono::milliseconds pause{25};
  // Full jitter, as AWS advises: members throttled together do not come back together.
  thread_local std::minstd_rand jitter(std::random_device{}());
  bool credentials_fetched_again = false;
  bool clock_corrected = false;
  const Options& o = impl_->options;
  while (true) {
    auto reply = impl_->Send(operation, json);
    if (!reply.ok()) return reply;
    if (IsCredentialRefusal(reply->error_type)) {
      const std::string refusal =
          reply->error_type + (reply->error_message.empty() ? "" : ": " + reply->error_message);
      if (o.credential_provider && !credentials_fetched_again) {
        credentials_fetched_again = true;
        o.credential_provider->Invalidate();
        if (o.log)
          o.log("CREDENTIALS refused by " + where() + " (" + refusal +
                "); fetching them again from " + o.credential_provider->source());
        continue;
      }
      const std::string source =
          o.credential_provider ? o.credential_provider->source() : "DynamoClient::Options";
      return Status::Connection(
          operation + " on " + where() + ": the credentials from " + source + " were refused" +
          (credentials_fetched_again ? " even when fetched anew" : "") + " (" + refusal + ")");
    }
    if (IsClockSkewRefusal(reply->error_type, reply->error_message) && !clock_corrected) {
      const auto offset = ClockOffsetFromDate(reply->date, std::chrono::system_clock::now());
      if (offset) {
        clock_corrected = true;
        o.clock_offset_ms->store(offset->count());
        if (o.log)
          o.log("CLOCK " + where() + " refused the request's time (" + reply->error_type +
                "); signing with the server's clock, " + std::to_string(offset->count()) +
                " ms from this host's");
        continue;
      }
    }
    if (!Retriable(*reply)) return reply;
    const auto wait = std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(pause.count() / 2, pause.count())(jitter));
    if (std::chrono::steady_clock::now() + wait > deadline) {
      // Throttling and 5xx answers pass: the caller treats this as an unreachable store and
      // tries again later (the consumer keeps polling meanwhile) instead of giving up.
      return Status::Connection(operation + " on " + where() + " is still refused after " +
                                std::to_string(impl_->options.timeout.count()) + " ms (HTTP " +
                                std::to_string(reply->http_status) + " " + reply->error_type +
                                (reply->error_message.empty() ? "" : ": " + reply->error_message) +
                                ")");
    }
    if (impl_->options.log)
      impl_->options.log("THROTTLED " + operation + " on " + where() + ": " + reply->error_type +
                         "; sending it again");
    std::this_thread::sleep_for(wait);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace walrelay::consumer
