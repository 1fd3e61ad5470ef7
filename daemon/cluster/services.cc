// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/services.h"

#include <algorithm>

#include <fmt/format.h>

namespace gsync::cluster {

namespace {
// Whether some immediate matches both (mask, tag) pairs: they agree on
// every bit both masks test.
bool overlap(const ServiceClaim& a, const ServiceClaim& b) {
  if (a.write_mask == 0 || b.write_mask == 0) return false;
  const uint64_t both = a.write_mask & b.write_mask;
  return (a.write_tag & both) == (b.write_tag & both);
}
}  // namespace

Status ServiceRegistry::add(CrossHostService* service, ServiceClaim claim) {
  if (service == nullptr) return Status(GSYNC_ERR_INTERNAL, "no service to add as " + claim.name);
  if ((claim.write_tag & ~claim.write_mask) != 0)
    return Status(GSYNC_ERR_INTERNAL,
                  fmt::format("{}: write tag {:#x} has bits outside its mask {:#x}", claim.name,
                              claim.write_tag, claim.write_mask));
  for (uint8_t t : claim.messages) {
    if (std::find(reserved_.begin(), reserved_.end(), t) != reserved_.end())
      return Status(GSYNC_ERR_INTERNAL,
                    fmt::format("{}: message type {} is the control plane's own", claim.name, t));
    if (std::count(claim.messages.begin(), claim.messages.end(), t) > 1)
      return Status(GSYNC_ERR_INTERNAL,
                    fmt::format("{}: message type {} claimed twice", claim.name, t));
  }
  for (const Entry& e : entries_) {
    if (e.service == service)
      return Status(GSYNC_ERR_INTERNAL,
                    fmt::format("{} is added already (as {})", claim.name, e.claim.name));
    for (uint8_t t : claim.messages)
      if (std::find(e.claim.messages.begin(), e.claim.messages.end(), t) != e.claim.messages.end())
        return Status(GSYNC_ERR_INTERNAL, fmt::format("{}: message type {} is {}'s", claim.name,
                                                      t, e.claim.name));
    if (overlap(claim, e.claim))
      return Status(GSYNC_ERR_INTERNAL,
                    fmt::format("{}: its writes (tag {:#x} under {:#x}) could be {}'s", claim.name,
                                claim.write_tag, claim.write_mask, e.claim.name));
  }
  entries_.push_back({service, std::move(claim)});
  return Status::ok();
}

void ServiceRegistry::remove(CrossHostService* service) {
  std::erase_if(entries_, [service](const Entry& e) { return e.service == service; });
}

CrossHostService* ServiceRegistry::for_message(uint8_t type) const {
  for (const Entry& e : entries_)
    if (std::find(e.claim.messages.begin(), e.claim.messages.end(), type) !=
        e.claim.messages.end())
      return e.service;
  return nullptr;
}

CrossHostService* ServiceRegistry::for_write(uint64_t imm_or_cookie) const {
  for (const Entry& e : entries_)
    if (e.claim.write_mask != 0 && (imm_or_cookie & e.claim.write_mask) == e.claim.write_tag)
      return e.service;
  return nullptr;
}

std::vector<CrossHostService*> ServiceRegistry::all() const {
  std::vector<CrossHostService*> out;
  for (const Entry& e : entries_) out.push_back(e.service);
  return out;
}

}  // namespace gsync::cluster
