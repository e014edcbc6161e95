// Topology arithmetic across rounds (probe/drift.h): changed pairs, the passive patch from a
// job's backlogged sends, and what a round under a job's traffic keeps of the topology before it.
#include "probe/drift.h"

#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

namespace rankmap::probe {
namespace {

TEST(Drift, ChangedPairsAndRelativeChange) {
  Topology a = Topology::empty({{"a", ""}, {"b", ""}});
  a.bandwidthMbps.at(0, 1) = 250;
  Topology b = a;
  b.bandwidthMbps.at(0, 1) = 130;
  EXPECT_EQ(changedPairs(a, b, 0.25), 1u);
  EXPECT_EQ(changedPairs(a, a, 0.0), 0u);
  EXPECT_DOUBLE_EQ(relativeChange(200, 150), 0.25);
  EXPECT_TRUE(std::isinf(relativeChange(0, 1)));
}

// Two racks of two behind a link model; host 1's link out measured at 1000 Mbit/s.
Topology linkModelOf4() {
  std::vector<Host> hosts;
  for (int i = 0; i < 4; ++i) hosts.push_back({fmt::format("h{}", i), ""});
  Topology t = Topology::empty(hosts);
  t.version = 3;
  t.groups = {HierarchyLevel{"rack", 1.0, {{"h0", "h1"}, {"h2", "h3"}}}};
  TopologyLinks links;
  links.hosts.assign(4, LinkCapacity{1000, 1000});
  links.uplinks = {{LinkCapacity{800, 800}, LinkCapacity{800, 800}}};
  links.uplinkLatencyUs = {0};
  t.links = links;
  for (size_t a = 0; a < 4; ++a)
    for (size_t b = 0; b < 4; ++b)
      if (a != b) t.bandwidthMbps.at(a, b) = *t.pathMbps(static_cast<int>(a), static_cast<int>(b));
  return t;
}

// A backlogged flow that gets what its path carries alone (across an uplink narrower than the
// host links) patches nothing; the same rate to a rack-mate is the sender's link.
TEST(DriftPatch, AFlowAtItsPathsRateAcrossANarrowUplinkIsNotPatched) {
  Topology t = linkModelOf4();
  t.links->uplinks = {{LinkCapacity{100, 100}, LinkCapacity{100, 100}}};
  for (size_t a = 0; a < 4; ++a)
    for (size_t b = 0; b < 4; ++b)
      if (a != b) t.bandwidthMbps.at(a, b) = *t.pathMbps(static_cast<int>(a), static_cast<int>(b));
  ASSERT_NEAR(*t.bandwidthMbps.at(1, 2), 100, 0.01);
  const std::map<std::string, double> busy = {
      {"h0", 0.02}, {"h1", 0.85}, {"h2", 0.01}, {"h3", 0.03}};
  std::vector<std::string> notes;
  EXPECT_FALSE(patchBacklogged(t, {{"h1", "h2", 97, 0.9}}, busy, 0.25, notes));
  EXPECT_TRUE(notes.empty());
  auto patched = patchBacklogged(t, {{"h1", "h0", 97, 0.9}}, busy, 0.25, notes);
  ASSERT_TRUE(patched);
  EXPECT_NEAR(patched->links->hosts[1].outMbps, 97, 0.01);
  // Below what the path carries alone: the sender's link again.
  patched = patchBacklogged(t, {{"h1", "h2", 48, 0.9}}, busy, 0.25, notes);
  ASSERT_TRUE(patched);
  EXPECT_NEAR(patched->links->hosts[1].outMbps, 48, 0.01);
}

TEST(DriftPatch, ABackloggedSenderSlowerThanItsLinkIsPatched) {
  const Topology t = linkModelOf4();
  std::vector<std::string> notes;
  // h1's sends in flight most of the time, the others' hardly.
  const std::map<std::string, double> alone = {
      {"h0", 0.02}, {"h1", 0.85}, {"h2", 0.01}, {"h3", 0.03}};
  // Within the threshold of the model: nothing.
  EXPECT_FALSE(patchBacklogged(t, {{"h1", "h2", 800, 0.9}}, alone, 0.25, notes));
  EXPECT_TRUE(notes.empty());
  // Unknown hosts are ignored.
  EXPECT_FALSE(
      patchBacklogged(t, {{"h9", "h2", 100, 0.9}, {"h1", "zz", 100, 0.9}}, alone, 0.25, notes));
  // Every sender as busy (a plan that loads every link evenly), or nobody else to compare
  // with: no sender stands out.
  const std::map<std::string, double> even = {{"h0", 0.6}, {"h1", 0.65}, {"h2", 0.58}, {"h3", 0.7}};
  EXPECT_FALSE(patchBacklogged(t, {{"h1", "h2", 100, 0.65}}, even, 0.25, notes));
  EXPECT_FALSE(patchBacklogged(t, {{"h1", "h2", 100, 0.9}}, {{"h1", 0.9}}, 0.25, notes));
  // Two backlogged flows out of h1 add up on its link.
  auto p = patchBacklogged(t, {{"h1", "h2", 200, 0.9}, {"h1", "h0", 150, 0.8}}, alone, 0.25, notes);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->version, 0);
  EXPECT_FALSE(p->time.empty());
  EXPECT_EQ(p->links->hosts[1].outMbps, 350);
  EXPECT_EQ(p->links->hosts[1].inMbps, 1000);  // only what the sends show
  EXPECT_EQ(*p->bandwidthMbps.at(1, 0), 350);
  EXPECT_EQ(*p->bandwidthMbps.at(1, 3), 350);
  EXPECT_EQ(*p->bandwidthMbps.at(0, 1), 1000);  // into h1: unchanged
  EXPECT_EQ(*p->bandwidthMbps.at(2, 3), 1000);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("h1 sends at 350 Mbit/s"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("1000 in topology version 3"), std::string::npos) << notes[0];
  // Without a link model, the fastest matrix entry is the host's rate.
  Topology m = t;
  m.links.reset();
  m.groups.clear();
  auto q = patchBacklogged(m, {{"h3", "h0", 300, 0.9}}, alone, 0.25, notes);
  ASSERT_TRUE(q);
  EXPECT_EQ(*q->bandwidthMbps.at(3, 2), 300);
}

TEST(DriftGroups,
     ARoundUnderJobTrafficKeepsTheBaselinesWhenItsOwnAreNoneContradictedOrHostsStayed) {
  Topology baseline = linkModelOf4();
  baseline.sharedLinks = {SharedLink{{"h0", "h1"}, 800}, SharedLink{{"h2", "h3"}, 800}};
  // The round under the job's traffic: no groups, h1's link out slower, four pairs measured.
  auto roundResult = [&] {
    Topology t = linkModelOf4();
    t.version = 0;
    t.groups.clear();
    t.links->uplinks.clear();
    t.links->uplinkLatencyUs.clear();
    t.links->hosts[1].outMbps = 500;
    t.measured = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
    for (size_t a = 0; a < 4; ++a)
      for (size_t b = 0; b < 4; ++b)
        if (a != b)
          t.bandwidthMbps.at(a, b) = *t.pathMbps(static_cast<int>(a), static_cast<int>(b));
    t.bandwidthMbps.at(2, 3) = 900;  // measured: stays
    return t;
  };
  Topology t = roundResult();
  ASSERT_EQ(*t.bandwidthMbps.at(0, 2), 1000);  // without groups: the host links only
  std::string note;
  ASSERT_TRUE(keepGroupsUnderJobTraffic(t, baseline, false, note));
  EXPECT_EQ(t.groups, baseline.groups);
  EXPECT_EQ(t.sharedLinks, baseline.sharedLinks);
  EXPECT_EQ(t.links->uplinks, baseline.links->uplinks);
  EXPECT_EQ(t.links->hosts[1].outMbps, 500);  // the round's own host links
  EXPECT_EQ(*t.bandwidthMbps.at(0, 2), 800);  // inferred again: through the uplinks
  EXPECT_EQ(*t.bandwidthMbps.at(1, 3), 500);  // h1's link out
  EXPECT_EQ(*t.bandwidthMbps.at(1, 2), 500);  // measured: as measured
  EXPECT_EQ(*t.bandwidthMbps.at(2, 3), 900);
  EXPECT_NE(note.find("topology version 3"), std::string::npos) << note;
  EXPECT_NO_THROW(Topology::fromJson(t.toJson(), "kept"));

  // Groups the round found (a migration) are its own; nothing to keep from a baseline without
  // groups, for other hosts, or with a link model in one of the two only.
  Topology moved = roundResult();
  moved.groups = {HierarchyLevel{"rack", 1.0, {{"h0", "h1", "h2"}, {"h3"}}}};
  moved.links->uplinks = baseline.links->uplinks;
  moved.links->uplinkLatencyUs = {0};
  moved.bandwidthMbps.at(3, 0) = 780;  // across the uplinks (800): agrees with them
  const Topology movedBefore = moved;
  EXPECT_FALSE(groupsContradicted(moved));
  EXPECT_FALSE(keepGroupsUnderJobTraffic(moved, baseline, false, note));
  EXPECT_EQ(moved.groups, movedBefore.groups);
  // The same groups after a light check that found every host in its group: what changed is
  // links, and the round's groups and uplinks were measured beside the job's flows.
  ASSERT_TRUE(keepGroupsUnderJobTraffic(moved, baseline, true, note));
  EXPECT_EQ(moved.groups, baseline.groups);
  EXPECT_EQ(moved.sharedLinks, baseline.sharedLinks);
  EXPECT_EQ(moved.links->uplinks, baseline.links->uplinks);
  EXPECT_EQ(moved.links->hosts[1].outMbps, 500);  // its own host links
  EXPECT_EQ(*moved.bandwidthMbps.at(3, 0), 780);  // and measured pairs stay
  EXPECT_NE(note.find("every host in its group"), std::string::npos) << note;
  EXPECT_FALSE(groupsContradicted(baseline));
  // Groups its own pairs contradict: a "rack" of three and one of one behind 68 Mbit/s uplinks,
  // while h2 -> h3 was measured alone across them at 900.
  Topology bogus = roundResult();
  bogus.groups = movedBefore.groups;
  bogus.links->uplinks = {{LinkCapacity{144, 68}, LinkCapacity{68, 144}}};
  bogus.links->uplinkLatencyUs = {0};
  auto why = groupsContradicted(bogus);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("h2 -> h3 measured alone at 900 Mbit/s across a rack uplink of 144"),
            std::string::npos)
      << *why;
  ASSERT_TRUE(keepGroupsUnderJobTraffic(bogus, baseline, false, note));
  EXPECT_EQ(bogus.groups, baseline.groups);
  EXPECT_EQ(bogus.links->uplinks, baseline.links->uplinks);
  EXPECT_NE(note.find("contradict"), std::string::npos) << note;
  Topology flat = baseline;
  flat.groups.clear();
  flat.links->uplinks.clear();
  flat.links->uplinkLatencyUs.clear();
  Topology u = roundResult();
  EXPECT_FALSE(keepGroupsUnderJobTraffic(u, flat, true, note));
  EXPECT_TRUE(u.groups.empty());
  Topology other = baseline;
  other.hosts[3].name = "h9";
  EXPECT_FALSE(keepGroupsUnderJobTraffic(u, other, true, note));
  Topology noModel = roundResult();
  noModel.links.reset();
  EXPECT_FALSE(keepGroupsUnderJobTraffic(noModel, baseline, true, note));
  EXPECT_TRUE(noModel.groups.empty());
}

TEST(DriftHostLinks, ARoundUnderJobTrafficLowersOnlyTheSlowSendersLinksOut) {
  const Topology baseline = linkModelOf4();
  // The round under the job's traffic: h1's link out slow (a neighbour loads it; the job's
  // backlog names h1), h2's link in read slow by the job's flow h1 -> h2 that never pauses, h3's
  // link out read faster; four pairs measured.
  auto roundResult = [&] {
    Topology t = linkModelOf4();
    t.version = 0;
    t.links->hosts[1].outMbps = 400;
    t.links->hosts[2].inMbps = 600;
    t.links->hosts[3].outMbps = 1100;
    t.measured = {{0, 2}, {1, 2}, {1, 0}, {3, 0}};
    for (size_t a = 0; a < 4; ++a)
      for (size_t b = 0; b < 4; ++b)
        if (a != b)
          t.bandwidthMbps.at(a, b) = *t.pathMbps(static_cast<int>(a), static_cast<int>(b));
    t.bandwidthMbps.at(0, 2) = 550;  // measured beside the job's flow into h2
    return t;
  };
  Topology t = roundResult();
  std::string note;
  ASSERT_TRUE(keepHostLinksUnderJobTraffic(t, baseline, {"h1"}, note));
  EXPECT_EQ(t.links->hosts[1].outMbps, 400);   // named by the backlog: the round's
  EXPECT_EQ(t.links->hosts[2].inMbps, 1000);   // the job's own flow: the baseline's
  EXPECT_EQ(t.links->hosts[3].outMbps, 1100);  // faster: the round's
  EXPECT_EQ(t.links->uplinks, baseline.links->uplinks);
  // Pairs into h2 were measured under the job's flow through its link: inferred again.
  const std::vector<std::pair<int, int>> measured = {{1, 0}, {3, 0}};
  EXPECT_EQ(t.measured, measured);
  EXPECT_EQ(*t.bandwidthMbps.at(0, 2), 800);  // through the uplinks
  EXPECT_EQ(*t.bandwidthMbps.at(1, 2), 400);  // h1's link out
  EXPECT_EQ(*t.bandwidthMbps.at(3, 2), 1000);
  EXPECT_EQ(*t.bandwidthMbps.at(1, 0), 400);  // measured, kept
  EXPECT_NE(note.find("h2 in 1000 (read 600)"), std::string::npos) << note;
  EXPECT_NE(note.find("slow senders: h1"), std::string::npos) << note;
  EXPECT_NO_THROW(Topology::fromJson(t.toJson(), "kept"));

  // Without the backlog naming h1, its link out is the baseline's too.
  Topology u = roundResult();
  ASSERT_TRUE(keepHostLinksUnderJobTraffic(u, baseline, {}, note));
  EXPECT_EQ(u.links->hosts[1].outMbps, 1000);
  EXPECT_EQ(*u.bandwidthMbps.at(1, 2), 800);  // through the uplinks
  EXPECT_NE(note.find("slow senders: none"), std::string::npos) << note;
  // Nothing read slower, other hosts, or no link model: nothing kept.
  Topology same = baseline;
  EXPECT_FALSE(keepHostLinksUnderJobTraffic(same, baseline, {}, note));
  EXPECT_EQ(same, baseline);
  Topology other = baseline;
  other.hosts[3].name = "h9";
  Topology v = roundResult();
  EXPECT_FALSE(keepHostLinksUnderJobTraffic(v, other, {}, note));
  EXPECT_EQ(v.links->hosts[2].inMbps, 600);
  Topology noModel = roundResult();
  noModel.links.reset();
  EXPECT_FALSE(keepHostLinksUnderJobTraffic(noModel, baseline, {}, note));
}

TEST(DriftPatch, ASeriesStandsOutOnlyAgainstOtherHostsBusyFractions) {
  const std::map<std::string, double> busy = {{"h0", 0.02}, {"h1", 0.85}, {"h2", 0.01}};
  EXPECT_TRUE(standsOut({"h1", "h2", 100, 0.9}, busy));
  EXPECT_FALSE(standsOut({"h1", "h2", 0, 0.9}, busy));     // no rate
  EXPECT_FALSE(standsOut({"h1", "h2", 100, 0.04}, busy));  // under 3 x the others' median 0.015
  EXPECT_FALSE(standsOut({"h1", "h2", 100, 0.9}, {{"h1", 0.85}}));  // nobody to compare with
}

TEST(DriftPatch, SlowSendersAreTheBacklogsAndTheHostsWhoseSendsStayInFlight) {
  using Names = std::set<std::string>;
  // No series backlogged: h1's last window busy 0.12, its peak of three 0.45 (the testbed's
  // tenant VM), every other host's about 0.03.
  const std::map<std::string, double> busy = {
      {"h0", 0.02}, {"h1", 0.12}, {"h2", 0.01}, {"h3", 0.03}};
  const std::map<std::string, double> peak = {
      {"h0", 0.03}, {"h1", 0.45}, {"h2", 0.02}, {"h3", 0.05}};
  EXPECT_EQ(slowSenders({}, busy, peak), Names{"h1"});
  EXPECT_EQ(slowSenders({}, busy, {}), Names{});  // agents older than the peak
  // A backlogged series that stands out names its sender as well.
  EXPECT_EQ(slowSenders({{"h3", "h0", 100, 0.9}}, busy, peak), (Names{"h1", "h3"}));
  EXPECT_EQ(slowSenders({{"h3", "h0", 100, 0.04}}, busy, peak), Names{"h1"});
  // A peak under kSlowSenderBusy, every host as busy, or nobody to compare with: nobody.
  EXPECT_EQ(slowSenders({}, busy, {{"h0", 0.02}, {"h1", 0.2}, {"h2", 0.01}}), Names{});
  EXPECT_EQ(slowSenders({}, busy, {{"h0", 0.6}, {"h1", 0.65}, {"h2", 0.58}}), Names{});
  EXPECT_EQ(slowSenders({}, busy, {{"h1", 0.9}}), Names{});
}

}  // namespace
}  // namespace rankmap::probe
