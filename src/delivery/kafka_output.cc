#include "delivery/kafka_output.h"

namespace walrelay {

Result<std::unique_ptr<KafkaOutput>> KafkaOutput::Create(boost::asio::io_context& io,
                                                         const RelaySettings& settings,
                                                         KafkaProducer::DeliveryHandler handler,
                                                         KafkaProducer::FailureHandler on_failure) {
  std::unique_ptr<KafkaOutput> output(new KafkaOutput(io));
  output->properties_ = {settings.kafka};
  if (settings.exactly_once.enabled()) {
    // settings.kafka carries the first id already (config/relay_settings.cc).
    const std::string& id = settings.exactly_once.transactional_id;
    output->transactional_ids_ = {id, SecondTransactionalId(id)};
    output->properties_.push_back(settings.kafka);
    output->properties_.back()["transactional.id"] = output->transactional_ids_.back();
  } else {
    output->transactional_ids_ = {""};
  }
  output->handler_ = std::move(handler);
  output->on_failure_ = std::move(on_failure);
  output->hidden_value_keys_ = settings.ProvidedKafkaKeys();
  WALRELAY_RETURN_IF_ERROR(output->MakeProducers());
  return output;
}

Status KafkaOutput::MakeProducers() {
  for (const auto& producer_properties : properties_) {
    auto producer =
        KafkaProducer::Create(producer_properties, handler_, on_failure_, hidden_value_keys_);
    if (!producer.ok()) return producer.status();
    producers_.push_back(std::move(producer).value());
    watches_.push_back(std::make_unique<KafkaEventWatch>(io_, *producers_.back()));
    if (started_) WALRELAY_RETURN_IF_ERROR(watches_.back()->Start());
  }
  return Status::Ok();
}

Status KafkaOutput::Renew() {
  for (const auto& watch : watches_) watch->Stop();
  PurgeAll();
  watches_.clear();
  producers_.clear();
  active_ = 0;
  return MakeProducers();
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
  started_ = true;
  for (const auto& watch : watches_) WALRELAY_RETURN_IF_ERROR(watch->Start());
  return Status::Ok();
}

void KafkaOutput::Stop() {
  started_ = false;
  for (const auto& watch : watches_) watch->Stop();
}

}  // namespace walrelay
