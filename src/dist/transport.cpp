// The slot handles of transport.hpp: each operation hands the slot from one state to the next.
#include "dist/transport.hpp"

#include <exception>
#include <utility>

#include "errors.hpp"

namespace pf::dist {
namespace detail {

SlotHandle::SlotHandle(SlotHandle&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), slot_(std::exchange(other.slot_, -1)), dropped_(other.dropped_) {}

SlotHandle& SlotHandle::operator=(SlotHandle&& other) noexcept {
  if (this != &other) {
    if (held()) fail_library_call("pipefill", "slot handle overwritten", dropped_, __FILE__, __LINE__);
    owner_ = std::exchange(other.owner_, nullptr);
    slot_ = std::exchange(other.slot_, -1);
    dropped_ = other.dropped_;
  }
  return *this;
}

SlotHandle::~SlotHandle() {
  if (held() && std::uncaught_exceptions() == 0)
    fail_library_call("pipefill", "slot handle destroyed", dropped_, __FILE__, __LINE__);
}

Transport& SlotHandle::owner() const {
  if (!held())
    fail_library_call("pipefill", "slot handle used", "it holds no slot (moved from, or finished)", __FILE__, __LINE__);
  return *owner_;
}

int SlotHandle::give_up() {
  owner();  // checks it is held
  owner_ = nullptr;
  return std::exchange(slot_, -1);
}

}  // namespace detail

float* ReadySlot::data() const { return owner().slot_data(id()); }

ReadySlot RecvTicket::wait() {
  Transport& transport = owner();
  transport.wait_recv(id(), nullptr);
  return ReadySlot(&transport, give_up());
}

std::optional<ReadySlot> RecvTicket::wait_unless(WaitInterrupt& interrupt) {
  Transport& transport = owner();
  if (!transport.wait_recv(id(), &interrupt)) return std::nullopt;
  return ReadySlot(&transport, give_up());
}

void RecvTicket::cancel() {
  Transport& transport = owner();
  const int slot = give_up();
  transport.cancel_recv(slot);
  transport.release_slot(slot);
}

bool SendTicket::done() { return owner().send_done(id()); }

void SendTicket::commit() {
  Transport& transport = owner();
  const int slot = give_up();
  transport.finish_send(slot);
  transport.release_slot(slot);
}

ReadySlot Transport::fresh() { return ReadySlot(this, acquire_slot()); }

RecvTicket Transport::post_recv(int floats, int tag) {
  const int slot = acquire_slot();
  start_recv(slot, floats, tag);
  return RecvTicket(this, slot);
}

SendTicket Transport::send(ReadySlot slot, int floats, int tag) {
  if (&slot.owner() != this)
    fail_library_call("pipefill", "Transport::send", "the slot belongs to another transport", __FILE__, __LINE__);
  const int id = slot.give_up();
  start_send(id, floats, tag);
  return SendTicket(this, id);
}

void Transport::release(ReadySlot slot) {
  if (&slot.owner() != this)
    fail_library_call("pipefill", "Transport::release", "the slot belongs to another transport", __FILE__, __LINE__);
  release_slot(slot.give_up());
}

}  // namespace pf::dist
