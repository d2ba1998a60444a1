#include "delivery/kafka_output.h"

namespace walrelay {

Result<std::unique_ptr<KafkaOutput>> KafkaOutput::Create(boost::asio::io_context& io,
                                                         const RelaySettings& settings,
                                                         KafkaProducer::DeliveryHandler handler,
                                                         KafkaProducer::FailureHandler on_failure) {
  std::unique_ptr<KafkaOutput> output(new KafkaOutput());
  std::vector<std::map<std::string, std::string>> properties{settings.kafka};
  if (settings.exactly_once.enabled()) {
    // settings.kafka carries the first id already (config/relay_settings.cc).
    const std::string& id = settings.exactly_once.transactional_id;
    output->transactional_ids_ = {id, SecondTransactionalId(id)};
    properties.push_back(settings.kafka);
    properties.back()["transactional.id"] = output->transactional_ids_.back();
  } else {
    output->transactional_ids_ = {""};
  }
  for (const auto& producer_properties : properties) {
    auto producer = KafkaProducer::Create(producer_properties, handler, on_failure,
                                          settings.ProvidedKafkaKeys());
    if (!producer.ok()) return producer.status();
    output->producers_.push_back(std::move(producer).value());
    output->watches_.push_back(std::make_unique<KafkaEventWatch>(io, *output->producers_.back()));
  }
  return output;
}

int KafkaOutput::OutstandingMessages() const {
  int outstanding = 0;
  for (const auto& producer : producers_) outstanding += producer->OutstandingMessages();
  return outstanding;
}

int KafkaOutput::Poll() {
  int served = 0;
  for (const auto& producer : producers_) served += producer->Poll();
  return served;
}

void KafkaOutput::PurgeAll() {
  for (const auto& producer : producers_) {
    if (producer->OutstandingMessages() > 0) producer->PurgeAll();
  }
}

const Status& KafkaOutput::failure() const {
  for (const auto& producer : producers_) {
    if (!producer->failure().ok()) return producer->failure();
  }
  return producers_.front()->failure();
}

Status KafkaOutput::Start() {
  for (const auto& watch : watches_) WALRELAY_RETURN_IF_ERROR(watch->Start());
  return Status::Ok();
}

void KafkaOutput::Stop() {
  for (const auto& watch : watches_) watch->Stop();
}

}  // namespace walrelay
