// The flow backend's rate engine, compiled: link classes, registered paths, incremental max-min fair
// rates and the idle paths' rent, as netbackend/flow.py's _PyRates does them.
//
// It is that class's operations in the same order on the same IEEE doubles (built with
// -ffp-contract=off, so no fused multiply-add), so both engines give the same rates, drain times and
// counters to the bit; tests/netbackend/test_flow_engines.py runs both side by side. Python's dicts
// iterate in insertion order and the Python engine's float sums follow that order, so the maps here that
// are iterated keep it too (OrderedMap). Read _PyRates for the why of each step; comments here say only
// where C++ has to do something Python did implicitly.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

constexpr double kRel = 1e-9;            // _REL
constexpr double kDrainBatchNs = 1e-3;  // _DRAIN_BATCH_NS
constexpr double kInf = std::numeric_limits<double>::infinity();

// A dict as Python's: iteration in insertion order, a re-inserted key goes last, assigning to a present
// key keeps its place. Erased entries are tombstones until they outnumber the live ones. Up to kLinear
// entries are found by a scan (most maps here are that small), beyond that through a hash index.
template <class K, class V>
class OrderedMap {
 public:
  struct Entry {
    K key;
    V val;
    bool live;
  };

  V* find(const K& k) {
    std::ptrdiff_t i = Locate(k);
    return i < 0 ? nullptr : &ents_[i].val;
  }
  bool contains(const K& k) const { return Locate(k) >= 0; }
  void set(const K& k, const V& v) {
    std::ptrdiff_t i = Locate(k);
    if (i >= 0) {
      ents_[i].val = v;
      return;
    }
    if (indexed_) idx_.emplace(k, ents_.size());
    ents_.push_back(Entry{k, v, true});
    ++live_;
    if (!indexed_ && ents_.size() > kLinear) Reindex();
  }
  bool erase(const K& k) {
    std::ptrdiff_t i = Locate(k);
    if (i < 0) return false;
    ents_[i].live = false;
    if (indexed_) idx_.erase(k);
    --live_;
    if (++dead_ > live_ + 4) Compact();
    return true;
  }
  std::size_t size() const { return live_; }
  bool empty() const { return live_ == 0; }
  void clear() {
    ents_.clear();
    idx_.clear();
    indexed_ = false;
    live_ = dead_ = 0;
  }
  // The first live entry (the least recently inserted); the map must not be empty.
  Entry& front() {
    std::size_t i = 0;
    while (!ents_[i].live) ++i;
    return ents_[i];
  }
  // Visit live entries in order; fn must not insert into or erase from this map.
  template <class F>
  void each(F&& fn) {
    for (auto& e : ents_)
      if (e.live) fn(e.key, e.val);
  }
  template <class F>
  void each(F&& fn) const {
    for (const auto& e : ents_)
      if (e.live) fn(e.key, e.val);
  }
  // Copy of the live entries, in order.
  OrderedMap copy() const {
    OrderedMap m;
    m.ents_.reserve(live_);
    for (const auto& e : ents_)
      if (e.live) m.ents_.push_back(e);
    m.live_ = live_;
    if (m.ents_.size() > kLinear) m.Reindex();
    return m;
  }

 private:
  static constexpr std::size_t kLinear = 8;

  std::ptrdiff_t Locate(const K& k) const {
    if (indexed_) {
      auto it = idx_.find(k);
      return it == idx_.end() ? -1 : static_cast<std::ptrdiff_t>(it->second);
    }
    for (std::size_t i = 0; i < ents_.size(); ++i)
      if (ents_[i].live && ents_[i].key == k) return static_cast<std::ptrdiff_t>(i);
    return -1;
  }
  void Reindex() {
    idx_.clear();
    idx_.reserve(ents_.size() * 2);
    for (std::size_t i = 0; i < ents_.size(); ++i)
      if (ents_[i].live) idx_.emplace(ents_[i].key, i);
    indexed_ = true;
  }
  void Compact() {
    std::size_t n = 0;
    for (std::size_t i = 0; i < ents_.size(); ++i)
      if (ents_[i].live) {
        if (n != i) ents_[n] = std::move(ents_[i]);
        ++n;
      }
    ents_.resize(n);
    dead_ = 0;
    if (n > kLinear) {
      Reindex();
    } else {
      idx_.clear();
      indexed_ = false;
    }
  }

  std::vector<Entry> ents_;
  std::unordered_map<K, std::size_t> idx_;
  bool indexed_ = false;
  std::size_t live_ = 0;
  std::size_t dead_ = 0;
};

struct Cls;
struct Path;

struct Flow {
  long long seq;
  Path* path;
  double rem;
  double rate = 0.0;
  double t_upd;
  Cls* bneck = nullptr;
  long long ver = 0;
  double drain_t = kInf;
  long long fm = 0;
  double nr = 0.0;
  Cls* nb = nullptr;
  int heap_refs = 0;  // drain-heap entries naming it (Python kept a drained flow alive through them)
  bool gone = false;
  // scratch of Refill, in place of its dicts by seq: in S while in_s is the call's number; its own
  // classes (own), the first of them in the heap's order (best) and the one in the heap (rep) while
  // own_mark / rep_mark are the pass's number; in the pass's additions while add_mark is.
  long long in_s = 0;
  long long own_mark = 0;
  std::vector<Cls*> own;
  double best_v = 0.0;
  long long best_cid = 0;
  Cls* best_l = nullptr;
  long long rep_mark = 0;
  Cls* rep = nullptr;
  long long add_mark = 0;
};

struct Path {
  int pid;
  std::vector<int> links, w;
  OrderedMap<Cls*, long long> classes;
  OrderedMap<long long, Flow*> flows;
  bool registered = false;
  std::vector<std::pair<Cls*, long long>> cw;
  bool cw_valid = false;
  double rent = 0.0;
  long long tick = 0;
};

struct Key {
  double cap;
  std::vector<std::pair<int, long long>> members;  // (path id, copies), sorted: a frozenset's content
  bool operator==(const Key& o) const { return cap == o.cap && members == o.members; }
};

struct KeyHash {
  std::size_t operator()(const Key& k) const {
    std::uint64_t bits;
    std::memcpy(&bits, &k.cap, sizeof bits);
    std::size_t h = std::hash<std::uint64_t>()(bits);
    for (const auto& m : k.members)
      h ^= std::hash<long long>()((static_cast<long long>(m.first) << 20) ^ m.second) + 0x9e3779b97f4a7c15ULL +
           (h << 6) + (h >> 2);
    return h;
  }
};

struct Cls {
  Key key;
  double cap;
  OrderedMap<Path*, long long> paths, active;
  long long nflows = 0;
  long long nlinks = 0;
  double load;
  OrderedMap<long long, Flow*> bn;
  long long cid;
  // scratch of one filling, valid while mark is its pass number
  long long mark = 0;
  std::vector<Flow*> s;
  double osum = 0.0;
  long long cnt = 0;
  double res = 0.0;
  long long max_mark = 0;  // maxv is the fastest member's rate in the pass max_mark (Refill's max_on)
  double maxv = 0.0;
};

struct DrainEntry {
  double t;
  long long seq;
  long long ver;
  Flow* f;
};
// std heaps are max-heaps: "greater" puts the smallest (t, seq, ver) on top, as heapq's tuples.
struct DrainAfter {
  bool operator()(const DrainEntry& a, const DrainEntry& b) const {
    if (a.t != b.t) return a.t > b.t;
    if (a.seq != b.seq) return a.seq > b.seq;
    return a.ver > b.ver;
  }
};

struct HeapEntry {
  double v;
  long long cid;
  Cls* l;
};
struct HeapAfter {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    if (a.v != b.v) return a.v > b.v;
    return a.cid > b.cid;
  }
};
inline bool Before(double v, long long cid, const HeapEntry& e) { return v < e.v || (v == e.v && cid < e.cid); }

class Engine {
 public:
  Engine(std::vector<double> cap, long long idle_paths, long long rent_classes, long long rent_sample,
         double rent_per_link)
      : cap_(std::move(cap)),
        idle_paths_(idle_paths),
        rent_classes_(rent_classes),
        rent_sample_(rent_sample),
        rent_per_link_(rent_per_link) {
    cls_.reserve(cap_.size());
    for (double c : cap_) {
      Cls* k = Intern(Key{c, {}}, OrderedMap<Path*, long long>(), 0.0);
      k->nlinks += 1;
      cls_.push_back(k);
    }
  }

  ~Engine() { Close(); }

  void Close() {
    for (Path* p : paths_) delete p;
    paths_.clear();
    for (auto& kv : classes_) delete kv.second;
    classes_.clear();
    cls_.clear();
    for (auto& e : drains_) {  // drained flows that only stale entries still name
      if (--e.f->heap_refs == 0 && e.f->gone) delete e.f;
    }
    drains_.clear();
    live_.each([](long long, Flow* f) { delete f; });
    live_.clear();
    idle_.clear();
  }

  int AddPath(std::vector<int> links, std::vector<int> w) {
    Path* p = new Path();
    p->pid = static_cast<int>(paths_.size());
    p->links = std::move(links);
    p->w = std::move(w);
    paths_.push_back(p);
    return p->pid;
  }

  int NumPaths() const { return static_cast<int>(paths_.size()); }

  void Start(const std::vector<std::tuple<long long, int, long long>>& added, double t) {
    OrderedMap<long long, Flow*> seeds;
    std::vector<Flow*> flows;
    flows.reserve(added.size());
    for (const auto& [seq, pid, wire] : added) {
      Flow* f = new Flow();
      f->seq = seq;
      f->path = paths_[pid];
      f->rem = static_cast<double>(wire);
      f->t_upd = t;
      flows.push_back(f);
    }
    for (Flow* f : flows) {
      seeds.set(f->seq, f);
      Path* p = f->path;
      if (!p->registered)
        Register(p);
      else if (p->flows.empty())
        idle_.erase(p);
      bool first = p->flows.empty();
      p->flows.set(f->seq, f);
      for (auto& [c, w] : ClassCopies(p)) {
        c->nflows += 1;
        if (first) c->active.set(p, w);
        if (!c->bn.empty()) c->bn.each([&](long long k, Flow* g) { seeds.set(k, g); });
      }
    }
    active_ += static_cast<long long>(flows.size());
    for (Flow* f : flows) live_.set(f->seq, f);
    Refill(seeds, t);
  }

  double NextDrain() {
    while (!drains_.empty() && drains_.front().f->ver != drains_.front().ver) PopDrain();
    return drains_.empty() ? kInf : drains_.front().t;
  }

  std::vector<std::pair<long long, double>> Drain(double t0) {
    std::vector<Flow*> gone;
    while (!drains_.empty()) {
      const DrainEntry& e = drains_.front();
      if (e.f->ver != e.ver) {
        PopDrain();
        continue;
      }
      if (e.t > t0 + kDrainBatchNs) break;
      Flow* f = e.f;
      PopDrain(/*keep=*/true);
      gone.push_back(f);
    }
    OrderedMap<long long, Flow*> seeds;
    for (Flow* f : gone) {
      f->ver += 1;
      active_ -= 1;
      long long sq = f->seq;
      live_.erase(sq);
      if (f->bneck != nullptr) {
        f->bneck->bn.erase(sq);
        f->bneck = nullptr;
      }
      Path* p = f->path;
      p->flows.erase(sq);
      double rate = f->rate;
      bool last = p->flows.empty();
      for (auto& [c, w] : ClassCopies(p)) {
        c->nflows -= 1;
        if (last) c->active.erase(p);
        if (c->nflows)
          c->load -= rate * static_cast<double>(w);
        else
          c->load = 0.0;
        if (!c->bn.empty()) c->bn.each([&](long long k, Flow* g) { seeds.set(k, g); });
      }
      if (last) {
        idle_.set(p, 0);
        p->rent = 0.0;
      }
    }
    for (Flow* f : gone) seeds.erase(f->seq);
    if (!seeds.empty()) Refill(seeds, t0);
    std::vector<std::pair<long long, double>> out;
    out.reserve(gone.size());
    for (Flow* f : gone) {
      out.emplace_back(f->seq, f->drain_t);
      f->gone = true;
      if (f->heap_refs == 0) delete f;
    }
    return out;
  }

  std::vector<std::pair<long long, double>> Rates() {
    std::vector<std::pair<long long, double>> out;
    live_.each([&](long long sq, Flow* f) { out.emplace_back(sq, f->rate); });
    return out;
  }

  long long refills = 0;
  long long refilled_flows = 0;

 private:
  const std::vector<std::pair<Cls*, long long>>& ClassCopies(Path* p) {
    if (!p->cw_valid) {
      p->cw.clear();
      p->classes.each([&](Cls* c, long long) { p->cw.emplace_back(c, *c->paths.find(p)); });
      p->cw_valid = true;
    }
    return p->cw;
  }

  void PushDrain(Flow* f) {
    f->heap_refs += 1;
    drains_.push_back(DrainEntry{f->drain_t, f->seq, f->ver, f});
    std::push_heap(drains_.begin(), drains_.end(), DrainAfter());
  }

  // Pops the top entry; its flow is freed when drained and no entry names it (keep: the caller holds it).
  void PopDrain(bool keep = false) {
    std::pop_heap(drains_.begin(), drains_.end(), DrainAfter());
    Flow* f = drains_.back().f;
    drains_.pop_back();
    if (--f->heap_refs == 0 && f->gone && !keep) delete f;
  }

  Cls* Intern(Key key, OrderedMap<Path*, long long> paths, double load) {
    auto it = classes_.find(key);
    if (it != classes_.end()) return it->second;
    Cls* c = new Cls();
    c->cap = key.cap;
    c->key = std::move(key);
    c->paths = std::move(paths);
    c->paths.each([&](Path* p, long long w) {
      if (!p->flows.empty()) c->active.set(p, w);
    });
    c->active.each([&](Path* p, long long) { c->nflows += static_cast<long long>(p->flows.size()); });
    c->load = load;
    c->cid = ++cid_;
    classes_.emplace(c->key, c);
    return c;
  }

  void Register(Path* p) {
    while (!idle_.empty() && static_cast<long long>(idle_.size()) >= idle_paths_) Unregister(idle_.front().key);
    Reclass(p, true);
  }

  void Unregister(Path* q) {
    idle_.erase(q);
    Reclass(q, false);
  }

  void Reclass(Path* p, bool add) {
    int pid = p->pid;
    // (old class, copies) -> new class, and how many of p's links go that way, in first-seen order
    std::vector<std::pair<std::pair<Cls*, long long>, Cls*>> trans;
    std::vector<long long> cnt;
    for (std::size_t i = 0; i < p->links.size(); ++i) {
      int l = p->links[i];
      long long w = p->w[i];
      Cls* a = cls_[l];
      std::size_t j = 0;
      for (; j < trans.size(); ++j)
        if (trans[j].first.first == a && trans[j].first.second == w) break;
      Cls* b;
      if (j == trans.size()) {
        OrderedMap<Path*, long long> paths = a->paths.copy();
        Key key{a->cap, a->key.members};
        std::pair<int, long long> me{pid, w};
        if (add) {
          paths.set(p, w);
          key.members.insert(std::lower_bound(key.members.begin(), key.members.end(), me), me);
        } else {
          paths.erase(p);
          auto at = std::lower_bound(key.members.begin(), key.members.end(), me);
          if (at != key.members.end() && *at == me) key.members.erase(at);
        }
        b = Intern(std::move(key), std::move(paths), a->load);
        trans.push_back({{a, w}, b});
        cnt.push_back(1);
      } else {
        b = trans[j].second;
        cnt[j] += 1;
      }
      cls_[l] = b;
    }
    p->classes.clear();
    p->cw_valid = false;
    std::vector<Cls*> freed;
    for (std::size_t j = 0; j < trans.size(); ++j) {
      Cls* a = trans[j].first.first;
      Cls* b = trans[j].second;
      long long n = cnt[j];
      a->nlinks -= n;
      b->nlinks += n;
      a->paths.each([&](Path* q, long long) {
        if (q == p) return;
        q->cw_valid = false;
        long long m = *q->classes.find(a) - n;
        if (m)
          q->classes.set(a, m);
        else
          q->classes.erase(a);
        long long* have = q->classes.find(b);
        q->classes.set(b, (have ? *have : 0) + n);
      });
      if (add) {
        long long* have = p->classes.find(b);
        p->classes.set(b, (have ? *have : 0) + n);
      }
      if (!a->nlinks) {
        classes_.erase(a->key);
        if (!a->bn.empty()) {
          a->bn.each([&](long long, Flow* g) { g->bneck = b; });
          a->bn.each([&](long long k, Flow* g) { b->bn.set(k, g); });
          a->bn.clear();
        }
        freed.push_back(a);  // a later (a, other copies) pair may still read it, as Python could
      }
    }
    for (Cls* a : freed) delete a;
    p->registered = add;
  }

  void Refill(const OrderedMap<long long, Flow*>& seeds, double t);

  std::vector<double> cap_;
  long long idle_paths_, rent_classes_, rent_sample_;
  double rent_per_link_;
  std::unordered_map<Key, Cls*, KeyHash> classes_;
  long long cid_ = 0;
  std::vector<Cls*> cls_;
  std::vector<Path*> paths_;
  OrderedMap<Path*, int> idle_;
  std::vector<DrainEntry> drains_;
  OrderedMap<long long, Flow*> live_;
  long long active_ = 0;
  long long pass_ = 0;
  long long calls_ = 0;
  // Refill's lists, kept between calls so that their memory is reused
  std::vector<Flow*> order_, best_order_, pulled_, lost_, add_;
  std::vector<Cls*> s_on_;
  std::vector<HeapEntry> heap_;
  std::vector<std::pair<Flow*, Cls*>> moves_;
};

void Engine::Refill(const OrderedMap<long long, Flow*>& seeds, double t) {
  const long long call = ++calls_;
  std::vector<Flow*>& order = order_;  // S, in insertion order (S only grows)
  order.clear();
  seeds.each([&](long long, Flow* f) {
    f->in_s = call;
    order.push_back(f);
  });
  std::vector<Cls*>& s_on = s_on_;
  std::vector<HeapEntry>& heap = heap_;
  std::vector<Flow*>& best_order = best_order_;
  std::vector<Flow*>& pulled = pulled_;
  std::vector<Flow*>& lost = lost_;
  std::vector<Flow*>& add = add_;
  std::vector<std::pair<Flow*, Cls*>>& moves = moves_;
  while (true) {
    refills += 1;
    refilled_flows += static_cast<long long>(order.size());
    pass_ += 1;
    const long long ep = pass_;
    s_on.clear();
    for (Flow* f : order) {
      double r = f->rate;
      Path* p = f->path;
      Cls* solo = nullptr;
      double solo_v = 0.0;
      long long solo_w = 0;
      for (auto& [l, w] : ClassCopies(p)) {
        double wd = static_cast<double>(w);
        if (l->nflows == 1) {
          double res = l->cap - (l->load - r * wd);
          if (res < 0.0) res = 0.0;
          double v = res / wd;
          if (solo == nullptr || v < solo_v || (v == solo_v && l->cid < solo->cid)) {
            solo = l;
            solo_v = v;
            solo_w = w;
          }
          continue;
        }
        if (l->mark != ep) {
          l->mark = ep;
          l->s.assign(1, f);
          l->osum = r * wd;
          l->cnt = w;
          s_on.push_back(l);
        } else {
          l->s.push_back(f);
          l->osum += r * wd;
          l->cnt += w;
        }
      }
      if (solo != nullptr) {
        solo->mark = ep;
        solo->s.assign(1, f);
        solo->osum = r * static_cast<double>(solo_w);
        solo->cnt = solo_w;
        s_on.push_back(solo);
      }
    }
    heap.clear();
    best_order.clear();
    for (Cls* l : s_on) {
      double res = l->cap - (l->load - l->osum);
      if (res < 0.0) res = 0.0;
      l->res = res;
      if (l->s.size() == 1) {
        Flow* f = l->s[0];
        double v = res / static_cast<double>(l->cnt);
        if (f->own_mark != ep) {
          f->own_mark = ep;
          f->own.assign(1, l);
          f->best_v = v;
          f->best_cid = l->cid;
          f->best_l = l;
          best_order.push_back(f);
        } else {
          f->own.push_back(l);
          if (v < f->best_v || (v == f->best_v && l->cid < f->best_cid)) {
            f->best_v = v;
            f->best_cid = l->cid;
            f->best_l = l;
          }
        }
      } else {
        heap.push_back(HeapEntry{res / static_cast<double>(l->cnt), l->cid, l});
      }
    }
    for (Flow* f : best_order) {
      f->rep_mark = ep;
      f->rep = f->best_l;
      heap.push_back(HeapEntry{f->best_v, f->best_cid, f->best_l});
    }
    std::make_heap(heap.begin(), heap.end(), HeapAfter());
    auto push = [&](const HeapEntry& e) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), HeapAfter());
    };
    long long left = static_cast<long long>(order.size());
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), HeapAfter());
      HeapEntry top = heap.back();
      heap.pop_back();
      Cls* l = top.l;
      long long n = l->cnt;
      if (n == 0) continue;
      double cur = l->res / static_cast<double>(n);
      if (cur > top.v) {
        push(HeapEntry{cur, top.cid, l});
        continue;
      }
      double share = cur > 0.0 ? cur : 0.0;
      pulled.clear();
      if (l->nflows > static_cast<long long>(l->s.size())) {
        double lim = share * (1 + kRel) + 1e-15;
        l->active.each([&](Path* q, long long) {
          q->flows.each([&](long long, Flow* g) {
            if (g->rate > lim && g->in_s != call) pulled.push_back(g);
          });
        });
      }
      if (!pulled.empty()) {
        left += static_cast<long long>(pulled.size());
        lost.clear();
        for (Flow* g : pulled) {
          g->in_s = call;
          order.push_back(g);
          double r = g->rate;
          Path* q = g->path;
          bool mine = false;
          HeapEntry e{0.0, 0, nullptr};
          for (auto& [m, w] : ClassCopies(q)) {
            double wd = static_cast<double>(w);
            if (m->mark != ep) {
              m->mark = ep;
              m->s.assign(1, g);
              m->osum = r * wd;
              double res = m->cap - (m->load - r * wd);
              res = res > 0.0 ? res : 0.0;
              m->res = res;
              m->cnt = w;
              s_on.push_back(m);
              double v = res / wd;
              if (!mine) {
                mine = true;
                g->own.assign(1, m);
                e = HeapEntry{v, m->cid, m};
              } else {
                g->own.push_back(m);
                if (Before(v, m->cid, e)) e = HeapEntry{v, m->cid, m};
              }
              continue;
            }
            std::vector<Flow*>& ms = m->s;
            if (ms.size() == 1 && ms[0]->fm != ep && ms[0]->rep_mark == ep && ms[0]->rep == m) lost.push_back(ms[0]);
            ms.push_back(g);
            m->osum += r * wd;
            m->res += r * wd;
            m->cnt += w;
            push(HeapEntry{m->res / static_cast<double>(m->cnt), m->cid, m});
          }
          if (mine) {
            g->own_mark = ep;
            g->rep_mark = ep;
            g->rep = e.l;
            push(e);
          }
        }
        for (Flow* f : lost) {
          bool any = false;
          HeapEntry e{0.0, 0, nullptr};
          for (Cls* m : f->own) {
            if (m->s.size() != 1) continue;
            double v = m->res / static_cast<double>(m->cnt);
            if (!any || Before(v, m->cid, e)) e = HeapEntry{v, m->cid, m};
            any = true;
          }
          if (any) {
            f->rep = e.l;
            push(e);
          }
        }
        continue;
      }
      for (Flow* f : l->s) {
        if (f->fm == ep) continue;
        f->fm = ep;
        f->nr = share;
        f->nb = l;
        left -= 1;
        for (auto& [m, w] : f->path->cw) {
          m->cnt -= w;
          m->res -= share * static_cast<double>(w);
        }
      }
      if (!left) break;
    }
    // --- does every outside flow whose bottleneck S touches still have one?
    add.clear();
    auto max_on = [&](Cls* m) {
      if (m->max_mark == ep) return m->maxv;
      double v = 0.0;
      m->active.each([&](Path* q, long long) {
        q->flows.each([&](long long, Flow* h) {
          double x = h->fm == ep ? h->nr : h->rate;
          if (x > v) v = x;
        });
      });
      m->max_mark = ep;
      m->maxv = v;
      return v;
    };
    moves.clear();
    for (Cls* l : s_on) {
      l->s.clear();
      if (l->bn.empty()) continue;
      l->bn.each([&](long long, Flow* g) {
        if (g->in_s == call || g->add_mark == ep) return;
        bool found = false;
        g->path->classes.each([&](Cls* m, long long) {
          if (found) return;
          double res = m->mark == ep ? m->res : m->cap - m->load;
          if (res <= m->cap * kRel && g->rate >= max_on(m) * (1 - kRel)) {
            if (m != l) moves.emplace_back(g, m);
            found = true;
          }
        });
        if (!found) {
          g->add_mark = ep;
          add.push_back(g);
        }
      });
    }
    for (auto& [g, m] : moves) {
      g->bneck->bn.erase(g->seq);
      g->bneck = m;
      m->bn.set(g->seq, g);
    }
    if (add.empty()) break;
    for (Flow* g : add) {
      g->in_s = call;
      order.push_back(g);
    }
  }
  // --- commit
  for (Flow* f : order) {
    long long sq = f->seq;
    double nr = f->nr;
    Cls* nb = f->nb;
    if (nb != f->bneck) {
      if (f->bneck != nullptr) f->bneck->bn.erase(sq);
      f->bneck = nb;
      nb->bn.set(sq, f);
    }
    if (nr == f->rate && f->drain_t != kInf) continue;
    if (f->rate != 0.0) f->rem -= f->rate * (t - f->t_upd);
    f->t_upd = t;
    double d = nr - f->rate;
    for (auto& [l, w] : f->path->cw) l->load += d * static_cast<double>(w);
    f->rate = nr;
    f->ver += 1;
    if (nr > 0.0) {
      double rem = f->rem > 0.0 ? f->rem : 0.0;
      f->drain_t = t + rem / nr;
      PushDrain(f);
    } else {
      f->drain_t = kInf;
    }
  }
  if (static_cast<long long>(drains_.size()) > 4 * active_ + 256) {
    std::vector<DrainEntry> fresh;
    live_.each([&](long long, Flow* f) {
      if (f->drain_t != kInf) {
        f->heap_refs += 1;
        fresh.push_back(DrainEntry{f->drain_t, f->seq, f->ver, f});
      }
    });
    for (auto& e : drains_)
      if (--e.f->heap_refs == 0 && e.f->gone) delete e.f;
    drains_.swap(fresh);
    std::make_heap(drains_.begin(), drains_.end(), DrainAfter());
  }
  // --- rent
  OrderedMap<Path*, int> drop;
  for (Flow* f : order) {
    Path* p = f->path;
    const auto& cw = ClassCopies(p);
    if (static_cast<long long>(cw.size()) <= rent_classes_) continue;
    p->tick += 1;
    if (p->tick < rent_sample_) continue;
    p->tick = 0;
    for (const auto& lw : cw) {
      Cls* l = lw.first;
      long long n = static_cast<long long>(l->paths.size()) - static_cast<long long>(l->active.size());
      if (!n) continue;
      double share = static_cast<double>(rent_sample_) / static_cast<double>(n);
      l->paths.each([&](Path* q, long long) {
        if (!q->flows.empty()) return;
        q->rent += share;
        if (q->rent >= rent_per_link_ * static_cast<double>(q->links.size())) drop.set(q, 0);
      });
    }
  }
  drop.each([&](Path* q, int) { Unregister(q); });
}

// ------------------------------------------------------------------ Python type

struct RatesObject {
  PyObject_HEAD Engine* engine;
};

bool IntList(PyObject* seq, std::vector<int>& out, const char* what) {
  PyObject* fast = PySequence_Fast(seq, what);
  if (fast == nullptr) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  out.resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return false;
    }
    out[i] = static_cast<int>(v);
  }
  Py_DECREF(fast);
  return true;
}

int Rates_init(RatesObject* self, PyObject* args, PyObject*) {
  PyObject* cap;
  long long idle_paths, rent_classes, rent_sample;
  double rent_per_link;
  if (!PyArg_ParseTuple(args, "OLLLd", &cap, &idle_paths, &rent_classes, &rent_sample, &rent_per_link)) return -1;
  PyObject* fast = PySequence_Fast(cap, "cap must be a sequence of floats");
  if (fast == nullptr) return -1;
  std::vector<double> caps(PySequence_Fast_GET_SIZE(fast));
  for (std::size_t i = 0; i < caps.size(); ++i) {
    caps[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
    if (caps[i] == -1.0 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return -1;
    }
  }
  Py_DECREF(fast);
  delete self->engine;
  self->engine = new Engine(std::move(caps), idle_paths, rent_classes, rent_sample, rent_per_link);
  return 0;
}

void Rates_dealloc(RatesObject* self) {
  delete self->engine;
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

Engine* Need(RatesObject* self) {
  if (self->engine == nullptr) PyErr_SetString(PyExc_RuntimeError, "rate engine closed");
  return self->engine;
}

PyObject* Rates_add_path(RatesObject* self, PyObject* args) {
  Engine* e = Need(self);
  PyObject *links, *w;
  if (e == nullptr || !PyArg_ParseTuple(args, "OO", &links, &w)) return nullptr;
  std::vector<int> l, c;
  if (!IntList(links, l, "links must be a sequence of ints") || !IntList(w, c, "copies must be a sequence of ints"))
    return nullptr;
  return PyLong_FromLong(e->AddPath(std::move(l), std::move(c)));
}

PyObject* Rates_start(RatesObject* self, PyObject* args) {
  Engine* e = Need(self);
  PyObject* added;
  double t;
  if (e == nullptr || !PyArg_ParseTuple(args, "Od", &added, &t)) return nullptr;
  PyObject* fast = PySequence_Fast(added, "flows must be a sequence of (seq, path id, wire bytes)");
  if (fast == nullptr) return nullptr;
  std::vector<std::tuple<long long, int, long long>> flows;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  flows.reserve(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long seq, wire;
    int pid;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "LiL", &seq, &pid, &wire)) {
      Py_DECREF(fast);
      return nullptr;
    }
    if (pid < 0 || pid >= e->NumPaths()) {
      Py_DECREF(fast);
      PyErr_Format(PyExc_ValueError, "unknown path id %d", pid);
      return nullptr;
    }
    flows.emplace_back(seq, pid, wire);
  }
  Py_DECREF(fast);
  e->Start(flows, t);
  Py_RETURN_NONE;
}

PyObject* Rates_next_drain(RatesObject* self, PyObject*) {
  Engine* e = Need(self);
  if (e == nullptr) return nullptr;
  return PyFloat_FromDouble(e->NextDrain());
}

PyObject* Pairs(const std::vector<std::pair<long long, double>>& v) {
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(v.size()));
  if (out == nullptr) return nullptr;
  for (std::size_t i = 0; i < v.size(); ++i) {
    PyObject* item = Py_BuildValue("(Ld)", v[i].first, v[i].second);
    if (item == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), item);
  }
  return out;
}

PyObject* Rates_drain(RatesObject* self, PyObject* args) {
  Engine* e = Need(self);
  double t0;
  if (e == nullptr || !PyArg_ParseTuple(args, "d", &t0)) return nullptr;
  return Pairs(e->Drain(t0));
}

PyObject* Rates_rates(RatesObject* self, PyObject*) {
  Engine* e = Need(self);
  if (e == nullptr) return nullptr;
  return Pairs(e->Rates());
}

PyObject* Rates_close(RatesObject* self, PyObject*) {
  if (self->engine != nullptr) self->engine->Close();
  Py_RETURN_NONE;
}

PyObject* Rates_refills(RatesObject* self, void*) {
  return PyLong_FromLongLong(self->engine ? self->engine->refills : 0);
}

PyObject* Rates_refilled_flows(RatesObject* self, void*) {
  return PyLong_FromLongLong(self->engine ? self->engine->refilled_flows : 0);
}

PyMethodDef kMethods[] = {
    {"add_path", reinterpret_cast<PyCFunction>(Rates_add_path), METH_VARARGS,
     "add_path(links, copies) -> path id: a new path, registered with its first flow."},
    {"start", reinterpret_cast<PyCFunction>(Rates_start), METH_VARARGS,
     "start([(seq, path id, wire bytes), ...], t): flows start at t; rates re-filled."},
    {"next_drain", reinterpret_cast<PyCFunction>(Rates_next_drain), METH_NOARGS,
     "next_drain() -> when the next flow drains (inf: none has a rate)."},
    {"drain", reinterpret_cast<PyCFunction>(Rates_drain), METH_VARARGS,
     "drain(t0) -> [(seq, drain time), ...]: the flows draining within 1 ps of t0 leave."},
    {"rates", reinterpret_cast<PyCFunction>(Rates_rates), METH_NOARGS,
     "rates() -> [(seq, wire bytes per ns), ...] of the active flows."},
    {"close", reinterpret_cast<PyCFunction>(Rates_close), METH_NOARGS, "close(): free paths, classes and flows."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef kGetSet[] = {
    {"refills", reinterpret_cast<getter>(Rates_refills), nullptr, "progressive-filling passes", nullptr},
    {"refilled_flows", reinterpret_cast<getter>(Rates_refilled_flows), nullptr, "sum of the sets' sizes", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject kRatesType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_flowcore",
                       "The flow backend's rate engine, compiled (netbackend/flow.py's _PyRates).", -1, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__flowcore(void) {
  kRatesType.tp_name = "_flowcore.Rates";
  kRatesType.tp_basicsize = sizeof(RatesObject);
  kRatesType.tp_flags = Py_TPFLAGS_DEFAULT;
  kRatesType.tp_doc = "Rates(cap, idle_paths, rent_classes, rent_sample, rent_per_link): the rate engine.";
  kRatesType.tp_new = PyType_GenericNew;
  kRatesType.tp_init = reinterpret_cast<initproc>(Rates_init);
  kRatesType.tp_dealloc = reinterpret_cast<destructor>(Rates_dealloc);
  kRatesType.tp_methods = kMethods;
  kRatesType.tp_getset = kGetSet;
  if (PyType_Ready(&kRatesType) < 0) return nullptr;
  PyObject* m = PyModule_Create(&kModule);
  if (m == nullptr) return nullptr;
  Py_INCREF(&kRatesType);
  if (PyModule_AddObject(m, "Rates", reinterpret_cast<PyObject*>(&kRatesType)) < 0) {
    Py_DECREF(&kRatesType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
