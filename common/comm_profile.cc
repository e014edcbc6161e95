#include "common/comm_profile.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/json.h"

namespace rankmap {
namespace {
// 64 bits of SHA-256: a key that two communicators of one job share only by accident.
std::string keyOf(std::string_view material) { return sha256Hex(material).substr(0, 16); }
}  // namespace

void CommProfile::add(Handle comm, std::string_view madeBy, std::string key) {
  auto [it, fresh] = byKey_.try_emplace(key, entries_.size());
  if (fresh)
    entries_.push_back(
        {std::string(madeBy), static_cast<int>(entries_.size()) + 1, std::move(key), {}});
  Entry& e = entries_[it->second];
  e.byHandle.emplace_back();
  live_[comm] = Live{it->second, e.byHandle.size() - 1};
}

void CommProfile::made(Handle comm, std::string_view madeBy, std::string_view keyMaterial) {
  if (!on_ || comm == nullptr) return;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    add(comm, madeBy, keyOf(keyMaterial));
  } catch (...) {
    // Not recorded: the communicator works as without recording.
  }
}

std::string CommProfile::childKey(Handle parent, std::string_view kind, int color) {
  auto it = live_.find(parent);
  if (it == live_.end()) return "";
  Live& h = it->second;
  int& count = kind == "split" ? h.splits : h.shrinks;
  return keyOf(fmt::format("{}/{}/{}/{}", entries_[h.entry].key, kind, ++count, color));
}

void CommProfile::split(Handle parent, std::string_view madeBy, int color, Handle child) {
  if (!on_) return;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    std::string key = childKey(parent, "split", color);
    if (!key.empty() && child != nullptr) add(child, madeBy, std::move(key));
  } catch (...) {
  }
}

void CommProfile::shrunk(Handle parent, std::string_view madeBy, Handle child) {
  if (!on_) return;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    std::string key = childKey(parent, "shrink", 0);
    if (!key.empty() && child != nullptr) add(child, madeBy, std::move(key));
  } catch (...) {
  }
}

void CommProfile::destroyed(Handle comm) {
  if (!on_) return;
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(comm);
}

void CommProfile::traffic(Handle comm, std::string_view collective, uint64_t bytes) {
  if (!on_ || bytes == 0) return;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(comm);
    if (it == live_.end()) return;
    auto& t = entries_[it->second.entry].byHandle[it->second.slot];
    auto c = t.find(collective);
    if (c == t.end()) c = t.emplace(std::string(collective), Counter{}).first;
    ++c->second.calls;
    c->second.bytes += bytes;
  } catch (...) {
  }
}

std::string CommProfile::record() const {
  Json a = Json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries_) {
    Traffic sum;
    for (const auto& h : e.byHandle)
      for (const auto& [coll, c] : h) {
        Counter& s = sum[coll];
        const bool messages = coll == "sendrecv";
        s.calls = messages ? s.calls + c.calls : std::max(s.calls, c.calls);
        s.bytes = messages ? s.bytes + c.bytes : std::max(s.bytes, c.bytes);
      }
    Json t = Json::object();
    for (const auto& [coll, c] : sum) t[coll] = {c.calls, c.bytes};
    a.push_back({{"m", e.madeBy}, {"c", e.call}, {"k", e.key}, {"t", std::move(t)}});
  }
  return a.dump();
}

size_t CommProfile::copyRecord(char* buf, size_t cap) const noexcept {
  try {
    std::string rec = record();
    if (buf != nullptr && cap > 0) {
      const size_t n = std::min(rec.size(), cap - 1);
      std::memcpy(buf, rec.data(), n);
      buf[n] = '\0';
    }
    return rec.size();
  } catch (...) {
    return 0;
  }
}

}  // namespace rankmap
