// The node's live state (package live, docs/live-state.md): loads that move
// the readings, faults, events and processes, in a file every process maps
// read-only beside the snapshot. Readers take no lock: each copies what it
// needs inside a seqlock, so a fork at any moment leaves nothing held.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvmock.h"

#define STATE_SIZE                                                                                   \
	(sizeof(struct live_header) + STATE_GPUS * sizeof(struct live_gpu) +                         \
	 STATE_EVENTS * sizeof(struct live_event) + STATE_PROCS * sizeof(struct live_proc))

// The model's constants; live/model.go has the same.
#define TAU_NS 30e9
#define HEAT_C 45.0

static void *live_map, *old_live; // the state mapped, and the one before (see snapshot.c)
static struct stat live_st;
static char live_path[PATH_MAX];
static char refused_path[PATH_MAX]; // a state file there that is not this nvmock's
static unsigned refused_gpus;      // its GPU count, when only that differs from the snapshot's
static unsigned my_pidns;

// Per-process trigger state: calls made on each GPU, and the faults whose
// call or probability trigger has fired here (keyed by fault id). Threads
// latch at once: an entry is claimed by moving its id to LATCH_BUSY, and
// at is an atomic read between two loads of id, so a reader never takes
// the time of an entry being refilled.
#define LATCH_BUSY 0xffffffffu
static uint32_t calls[STATE_GPUS];
static struct {
	uint32_t id;
	uint64_t at;
} latched[STATE_GPUS][STATE_FAULTS];

// The memory registered processes use, per GPU, as this process last
// summed it: summed again when the state changes, or after 500 ms (a pid
// exits without a write). A per-process seqlock: a thread that finds it
// being refreshed sums for itself. Every field is an atomic, read with
// acquire and written with release, so no plain access races with the
// refresh and the reader needs no fence to order its re-check.
static struct {
	uint32_t version; // odd while a thread refreshes it
	uint64_t generation, at_ns;
	unsigned long long sum[STATE_GPUS];
} mem_cache = {.generation = UINT64_MAX};

static unsigned read_pidns(void)
{
	char l[64];
	ssize_t n = readlink("/proc/self/ns/pid", l, sizeof l - 1);
	if (n <= 0)
		return 0;
	l[n] = '\0';
	return (unsigned)strtoul(l + strcspn(l, "0123456789"), NULL, 10);
}

// nvmock_live_map maps the state file: NVMOCK_STATE, else "state" beside
// the snapshot file. None, or one that is not ours, leaves readings static.
static void live_set(const struct live_header *h)
{
	nvmock.live = h;
	nvmock.live_gpus = h != NULL ? (const void *)(h + 1) : NULL;
	nvmock.live_events = h != NULL ? (const void *)(nvmock.live_gpus + STATE_GPUS) : NULL;
	nvmock.live_procs = h != NULL ? (const void *)(nvmock.live_events + STATE_EVENTS) : NULL;
}

static void retire_live(void)
{
	live_set(NULL);
	if (old_live != NULL)
		munmap(old_live, STATE_SIZE);
	old_live = live_map;
	live_map = NULL;
	live_path[0] = '\0';
}

void nvmock_live_map(const char *snapshot)
{
	// Each init counts this process's calls afresh.
	memset(calls, 0, sizeof calls);
	memset(latched, 0, sizeof latched);
	refused_path[0] = '\0';
	refused_gpus = 0;
	__atomic_store_n(&mem_cache.generation, UINT64_MAX, __ATOMIC_RELEASE); // another file may count the same generations
	char path[PATH_MAX];
	const char *env = getenv("NVMOCK_STATE");
	if (env != NULL && env[0] != '\0') {
		snprintf(path, sizeof path, "%s", env);
	} else if (snapshot != NULL) {
		snprintf(path, sizeof path, "%s", snapshot);
		char *slash = strrchr(path, '/');
		if (slash == NULL || (size_t)(slash - path) + sizeof "/state" > sizeof path)
			return;
		strcpy(slash, "/state");
	} else {
		retire_live();
		return;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		retire_live();
		return;
	}
	struct stat st;
	void *m = MAP_FAILED;
	int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size == STATE_SIZE;
	// The file mapped at an earlier init: keep it (a file of another
	// layout is a new inode, live.Create).
	if (ok && live_map != NULL && strcmp(path, live_path) == 0 && st.st_dev == live_st.st_dev &&
	    st.st_ino == live_st.st_ino) {
		close(fd);
		live_set(live_map);
		return;
	}
	retire_live();
	snprintf(refused_path, sizeof refused_path, "%s", path); // until mapped
	if (ok)
		m = mmap(NULL, STATE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		if (env != NULL && env[0] != '\0')
			nvmock_warn("state %s (NVMOCK_STATE): not a state file of this nvmock; readings stay static", path);
		return;
	}
	const struct live_header *h = m;
	if (memcmp(h->magic, "NVMOCKLV", 8) != 0 || h->version != STATE_VERSION ||
	    h->header_size != sizeof *h || h->gpu_size != sizeof(struct live_gpu) ||
	    h->event_size != sizeof(struct live_event) || h->proc_size != sizeof(struct live_proc)) {
		if (env != NULL && env[0] != '\0')
			nvmock_warn("state %s: made for another node or nvmock; readings stay static", path);
		munmap(m, STATE_SIZE);
		return;
	}
	if (h->gpus != nvmock.hdr->device_count) {
		refused_gpus = h->gpus;
		if (env != NULL && env[0] != '\0')
			nvmock_warn("state %s: made for %u GPUs, the snapshot has %u; readings stay static",
				    path, (unsigned)h->gpus, (unsigned)nvmock.hdr->device_count);
		munmap(m, STATE_SIZE);
		return;
	}
	live_map = m;
	live_st = st;
	refused_path[0] = '\0';
	snprintf(live_path, sizeof live_path, "%s", path);
	my_pidns = read_pidns();
	live_set(h);
}

// nvmock_live_path is the mapped state file's path (for MIG writes), or NULL.
const char *nvmock_live_path(void)
{
	return live_map != NULL ? live_path : NULL;
}

// nvmock_live_refused is the state file the last init found and could not
// use (another nvmock's layout, another node's), or NULL.
const char *nvmock_live_refused(void)
{
	return live_map == NULL && refused_path[0] != '\0' ? refused_path : NULL;
}

// nvmock_live_refused_gpus is the GPU count of the refused state file when
// only that differs from the snapshot's; 0 otherwise.
unsigned nvmock_live_refused_gpus(void)
{
	return nvmock_live_refused() != NULL ? refused_gpus : 0;
}

size_t nvmock_live_size(void)
{
	return STATE_SIZE;
}

// A seq value a writer left odd (it died inside): readers stop waiting
// for it; the next write moves on from it (live.File.publish). 0, which
// no writer leaves, for none (it was 1, a fresh state's first publish).
static uint32_t stuck_seq;

// writer_alive says whether a process holds the writers' lock on the
// mapped state: one inside the seqlock does, a dead one's lock went with it.
static int writer_alive(void)
{
	int saved = errno; // the caller's program may read it after an NVML call
	int fd = live_path[0] != '\0' ? open(live_path, O_RDONLY | O_CLOEXEC) : -1;
	int held = fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	if (fd >= 0)
		close(fd); // drops the lock if it was taken
	errno = saved;
	return held;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// nvmock_live_copy copies n bytes of the state inside the seqlock. A writer
// the scheduler took off the CPU inside holds it for milliseconds on a busy
// node, so past a short spin the reader sleeps, up to 100 ms as the Go
// readers wait (live.File.Read); then, unless a live writer holds the lock
// (stopped or throttled: up to 1 s in all), the seq is taken for a dead
// writer's and the state read as it lies, as live.File.Read does, by this
// call and, at once, the next ones until a write moves it on. It returned
// 0 there, and callers fell back to the snapshot: the node's MIG devices,
// settings and faults vanished until the next write (review).
int nvmock_live_copy(void *dst, const void *src, size_t n)
{
	uint64_t deadline = 0;
	int extended = 0;
	for (unsigned tries = 0;; tries++) {
		uint32_t s = __atomic_load_n(&nvmock.live->seq, __ATOMIC_ACQUIRE);
		if (s & 1 && s != __atomic_load_n(&stuck_seq, __ATOMIC_RELAXED)) {
			if (tries < 1000) {
				nvmock_relax();
				continue;
			}
			uint64_t now = mono_ns();
			if (deadline == 0)
				deadline = now + 100000000ull;
			if (now >= deadline && !extended && writer_alive()) {
				deadline += 900000000ull;
				extended = 1;
			}
			if (now < deadline) {
				struct timespec ts = {0, 50000};
				nanosleep(&ts, NULL);
				continue;
			}
			__atomic_store_n(&stuck_seq, s, __ATOMIC_RELAXED);
		}
		if (s & 1) {
			memcpy(dst, src, n);
			return 1;
		}
		memcpy(dst, src, n);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&nvmock.live->seq, __ATOMIC_RELAXED) == s)
			return 1;
	}
}

// The last wall-clock time read: a fault whose time is before it has
// happened, without reading the clock again (the fault path runs on every
// call on a faulted GPU).
static uint64_t last_now;

uint64_t nvmock_live_now(void)
{
	if (nvmock.live != NULL && __atomic_load_n(&nvmock.live->frozen, __ATOMIC_ACQUIRE)) {
		// Both fields of one write: a freeze's flag with the time before
		// it would be 1970 (review, from reading).
		struct live_header h;
		if (nvmock_live_copy(&h, nvmock.live, sizeof h) && h.frozen)
			return h.frozen_ns;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	__atomic_store_n(&last_now, t, __ATOMIC_RELAXED);
	return t;
}

// nvmock_live_now_for is a time late enough to decide g's timed faults: the last one
// read when every fault's time is before it, else the clock.
uint64_t nvmock_live_now_for(const struct live_gpu *g)
{
	uint64_t t = __atomic_load_n(&last_now, __ATOMIC_RELAXED);
	if (t == 0 || __atomic_load_n(&nvmock.live->frozen, __ATOMIC_ACQUIRE))
		return nvmock_live_now();
	for (unsigned i = 0; i < g->faults && i < STATE_FAULTS; i++)
		if (g->fault_trigger[i] == LIVE_TRIGGER_AT && g->fault_param[i] > t)
			return nvmock_live_now();
	return t;
}

int nvmock_live_read(unsigned node, struct live_gpu *g)
{
	if (nvmock.live == NULL || node >= STATE_GPUS)
		return 0;
	const struct live_gpu *src = &nvmock.live_gpus[node];
	if (__atomic_load_n(&src->model, __ATOMIC_RELAXED) == 0 && __atomic_load_n(&src->faults, __ATOMIC_RELAXED) == 0)
		return 0;
	if (!nvmock_live_copy(g, src, sizeof *g))
		return 0;
	return g->model != 0 || g->faults != 0;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

// latch reports whether fault slot i has fired in this process, and when.
static int latch_get(unsigned node, uint32_t id, uint64_t *at)
{
	for (unsigned k = 0; k < STATE_FAULTS; k++) {
		if (__atomic_load_n(&latched[node][k].id, __ATOMIC_ACQUIRE) == id) {
			*at = __atomic_load_n(&latched[node][k].at, __ATOMIC_ACQUIRE);
			if (__atomic_load_n(&latched[node][k].id, __ATOMIC_RELAXED) == id)
				return 1;
		}
	}
	return 0;
}

static void latch_set(unsigned node, uint32_t id, uint64_t at)
{
	uint64_t old;
	if (latch_get(node, id, &old))
		return;
	// A free entry, else one no fault of the GPU holds any more (a GPU has
	// at most STATE_FAULTS faults, so one of those two is there).
	struct live_gpu g;
	int have = nvmock_live_read(node, &g);
	for (unsigned k = 0; k < STATE_FAULTS; k++) {
		uint32_t cur = __atomic_load_n(&latched[node][k].id, __ATOMIC_ACQUIRE);
		if (cur == LATCH_BUSY)
			continue;
		int stale = cur != 0 && have;
		for (unsigned i = 0; stale && i < g.faults && i < STATE_FAULTS; i++)
			stale = g.fault_id[i] != cur;
		if (cur != 0 && !stale)
			continue;
		// Claimed by moving to BUSY, not to 0: two threads could both
		// move a free entry from 0 to 0, and one latch would be lost.
		if (__atomic_compare_exchange_n(&latched[node][k].id, &cur, LATCH_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__atomic_store_n(&latched[node][k].at, at, __ATOMIC_RELEASE);
			__atomic_store_n(&latched[node][k].id, id, __ATOMIC_RELEASE);
			return;
		}
	}
}

// nvmock_live_active says whether fault slot i hits this process now, and
// since when.
int nvmock_live_active(unsigned node, const struct live_gpu *g, unsigned i, uint64_t now, uint64_t *since)
{
	if (g->fault_pid[i] != 0 && g->fault_pid[i] != (uint32_t)nvmock.pid)
		return 0;
	switch (g->fault_trigger[i]) {
	case LIVE_TRIGGER_AT:
		*since = g->fault_param[i];
		return now >= g->fault_param[i];
	case LIVE_TRIGGER_CALLS:
	case LIVE_TRIGGER_PROBABILITY: return latch_get(node, g->fault_id[i], since);
	default: return 0;
	}
}

// nvmock_before_reset says whether fault slot i, in force since since,
// came by the GPU's last reset; of faults at the reset's very time (a
// frozen clock), those added before it, by id.
int nvmock_before_reset(const struct live_gpu *g, unsigned i, uint64_t since)
{
	if (g->reset_ns == 0)
		return 0;
	if (since != g->reset_ns)
		return since < g->reset_ns;
	return (int32_t)(g->fault_id[i] - g->reset_fault_id) <= 0;
}

// nvmock_live_fx sums what the active faults do to a GPU.
void nvmock_live_fx(unsigned node, const struct live_gpu *g, uint64_t now, struct live_fx *fx)
{
	memset(fx, 0, sizeof *fx);
	for (unsigned i = 0; i < g->faults && i < STATE_FAULTS; i++) {
		uint64_t since;
		if (!nvmock_live_active(node, g, i, now, &since))
			continue;
		// Errors by the last reset are in the aggregate counts only, and
		// their rows were remapped (pages retired) at it.
		int recent = !nvmock_before_reset(g, i, since);
		switch (g->fault_kind[i]) {
		case LIVE_FAULT_LOST: fx->lost = 1; break;
		case LIVE_FAULT_ECC:
			fx->dbe += g->fault_count[i];
			if (recent) {
				fx->dbe_vol += g->fault_count[i];
				fx->remap_pending = 1;
			}
			break;
		case LIVE_FAULT_SBE:
			fx->sbe += g->fault_count[i];
			if (recent)
				fx->sbe_vol += g->fault_count[i];
			break;
		case LIVE_FAULT_THERMAL: fx->thermal = 1; break;
		case LIVE_FAULT_POWER_BRAKE: fx->brake = 1; break;
		case LIVE_FAULT_NVLINK_DOWN: fx->links_down |= 1u << (g->fault_count[i] & 31); break;
		case LIVE_FAULT_REMAP_FAILURE: fx->remap_failed = 1; break;
		case LIVE_FAULT_XID:
			// XID 154's text names the action: "changed from 0x0 (None)
			// to 0x1 (GPU Reset Required)".
			if (g->fault_xid[i] == 154 && recent)
				fx->recovery = NVML_GPU_RECOVERY_ACTION_GPU_RESET;
			break;
		}
	}
}

// nvmock_live_check runs on every call on a GPU with faults: it counts the
// call, fires call and probability triggers, and fails the call on a lost GPU.
nvmlReturn_t nvmock_live_check(const struct nvmock_dev *d)
{
	struct live_gpu g;
	if (!nvmock_live_read(d->node_index, &g))
		return NVML_SUCCESS;
	uint64_t now = nvmock_live_now_for(&g);
	uint32_t n = __atomic_add_fetch(&calls[d->node_index], 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < g.faults && i < STATE_FAULTS; i++) {
		if (g.fault_pid[i] != 0 && g.fault_pid[i] != (uint32_t)nvmock.pid)
			continue;
		int fire = 0;
		if (g.fault_trigger[i] == LIVE_TRIGGER_CALLS)
			fire = n > g.fault_param[i];
		else if (g.fault_trigger[i] == LIVE_TRIGGER_PROBABILITY)
			fire = (mix(nvmock.live->seed ^ ((uint64_t)g.fault_id[i] << 32) ^ ((uint64_t)nvmock.pid << 48) ^ n) >> 32) <
			       g.fault_param[i];
		if (fire)
			latch_set(d->node_index, g.fault_id[i], now);
	}
	struct live_fx fx;
	nvmock_live_fx(d->node_index, &g, now, &fx);
	return fx.lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

// nvmock_live_lost says whether a GPU is lost to this process (handle lookups).
int nvmock_live_lost(unsigned node)
{
	struct live_gpu g;
	if (node >= STATE_GPUS || __atomic_load_n(&nvmock.live_gpus[node].faults, __ATOMIC_RELAXED) == 0)
		return 0; // no copy of a loaded GPU's record on every handle lookup
	if (!nvmock_live_read(node, &g) || g.faults == 0)
		return 0;
	struct live_fx fx;
	nvmock_live_fx(node, &g, nvmock_live_now_for(&g), &fx);
	return fx.lost;
}

// The load model at time t: the segment that covers t.
struct seg {
	const uint32_t *load;
	uint64_t since;
	uint32_t temp0;
	uint64_t e0;
	uint32_t limit; // the power limit in force (NA32: none)
	uint64_t v0;    // power violation time at since
};

static struct seg seg_at(const struct snap_device *s, const struct live_gpu *g, uint64_t t)
{
	uint32_t limit = nvmock_power_limit(s, g);
	if (t >= g->since_ns)
		return (struct seg){g->load, g->since_ns, g->temp0_mc, g->energy0_mj, limit, g->viol0_ns};
	return (struct seg){g->prev_load, g->prev_since_ns, g->prev_temp0_mc, g->prev_energy0_mj,
			    g->prev_power_limit_mw ? g->prev_power_limit_mw : limit, g->prev_viol0_ns};
}

// util is one engine's utilization at t: the load, with noise that depends
// only on the seed, the GPU, the engine and the 100 ms slot.
unsigned nvmock_live_util(unsigned node, const struct live_gpu *g, unsigned engine, uint64_t t)
{
	if (!g->model) {
		const struct snap_device *d = &nvmock.node[node];
		uint32_t v[4] = {d->util_gpu, d->util_memory, d->util_encoder, d->util_decoder};
		return v[engine] == NA32 ? 0 : v[engine];
	}
	struct seg s = seg_at(&nvmock.node[node], g, t);
	double u = s.load[engine];
	if (g->jitter != 0 && u > 0) {
		uint64_t h = mix(nvmock.live->seed ^ mix(((uint64_t)node << 40) ^ ((uint64_t)engine << 56) ^ (t / 100000000ull)));
		u += g->jitter * ((double)(h >> 11) / 9007199254740992.0 * 2 - 1);
	}
	if (u < 0)
		u = 0;
	if (u > 100)
		u = 100;
	return (unsigned)(u + 0.5);
}

// nvmock_power_limit is the enforced power limit: one set with nvidia-smi
// -pl (g's settings), else the snapshot's.
uint32_t nvmock_power_limit(const struct snap_device *s, const struct live_gpu *g)
{
	if (g != NULL && (g->cfg_set & LIVE_CFG_POWER_LIMIT) && s->power_enforced_mw != NA32)
		return g->power_limit_mw;
	return s->power_enforced_mw;
}

// demand is the power a load asks for: idle to the board's TDP (its
// default enforced limit).
static double demand(const struct snap_device *s, double load)
{
	if (s->power_enforced_mw == NA32 || s->power_enforced_mw < s->power_draw_mw)
		return s->power_draw_mw;
	return s->power_draw_mw + (double)(s->power_enforced_mw - s->power_draw_mw) * (load > 100 ? 100 : load) / 100;
}

// power_of is the demand held to the power limit (never below idle).
static double power_of(const struct snap_device *s, uint32_t limit, double load)
{
	double p = demand(s, load);
	if (limit != NA32 && p > limit)
		p = limit > s->power_draw_mw ? limit : s->power_draw_mw;
	return p;
}

// braked is power p under a power brake: at most half the limit in force,
// one set with -pl too.
static double braked(double p, uint32_t limit)
{
	return limit != NA32 && p > limit / 2.0 ? limit / 2.0 : p;
}

uint32_t nvmock_live_power(const struct nvmock_dev *d, const struct live_gpu *g, const struct live_fx *fx, uint64_t t)
{
	double p = g->model ? power_of(d->s, seg_at(d->s, g, t).limit, nvmock_live_util(d->node_index, g, 0, t))
			    : d->s->power_draw_mw;
	if (fx->brake)
		p = braked(p, nvmock_power_limit(d->s, g));
	return (uint32_t)(p + 0.5);
}

// target_of: HEAT_C above idle at the board's TDP, in proportion to the
// power drawn below it (a lowered limit or a brake keeps the GPU cooler).
static double target_of(const struct snap_device *s, double p)
{
	double t = s->temp_gpu * 1000.0;
	if (s->power_enforced_mw != NA32 && s->power_enforced_mw > s->power_draw_mw)
		t += HEAT_C * 1000 * (p - s->power_draw_mw) / (s->power_enforced_mw - s->power_draw_mw);
	uint32_t slow = s->temp_threshold[NVML_TEMPERATURE_THRESHOLD_SLOWDOWN];
	if (slow != NA32 && t > (slow - 3) * 1000.0)
		t = (slow - 3) * 1000.0;
	return t;
}

// brake_ns is how long before t a power brake has held the GPU, within
// the segment from since: the energy and heat of that stretch are the
// braked power's. The writers reckon the same when they start a segment
// (live/model.go brakeNS), for the node-wide timed brakes they see.
static uint64_t brake_ns(const struct nvmock_dev *d, const struct live_gpu *g, uint64_t since, uint64_t t)
{
	if (g->faults == 0 || t <= since)
		return 0;
	uint64_t b = nvmock_live_slowdown(d, g, LIVE_FAULT_POWER_BRAKE, t);
	return b < t - since ? b : t - since;
}

// at_seg is the temperature (milli-C) and energy (mJ) of segment x at t,
// the stretch under a brake at the braked power: as live/model.go's
// Board.at reckons them, step for step, so a segment the writer starts
// where the readings stand reads the same.
static void at_seg(const struct nvmock_dev *d, const struct live_gpu *g, const struct seg *x, uint64_t t, double *mc,
		   uint64_t *mj)
{
	const struct snap_device *s = d->s;
	uint64_t dt = t > x->since ? t - x->since : 0;
	uint64_t b = x->since == g->since_ns ? brake_ns(d, g, x->since, t) : 0; // the segment before: as it ran
	double p = power_of(s, x->limit, x->load[0]);
	double target = target_of(s, p);
	*mc = target + (x->temp0 - target) * exp(-(double)(dt - b) / TAU_NS);
	*mj = x->e0;
	if (s->power_draw_mw != NA32)
		*mj += (uint64_t)(p * (double)(dt - b) / 1e9);
	if (b > 0) {
		double pb = braked(p, x->limit);
		double tb = target_of(s, pb);
		*mc = tb + (*mc - tb) * exp(-(double)b / TAU_NS);
		if (s->power_draw_mw != NA32)
			*mj += (uint64_t)(pb * (double)b / 1e9);
	}
}

uint32_t nvmock_live_temp(const struct nvmock_dev *d, const struct live_gpu *g, const struct live_fx *fx, uint64_t t)
{
	unsigned c = d->s->temp_gpu;
	if (g->model) {
		struct seg s = seg_at(d->s, g, t);
		double mc;
		uint64_t mj;
		at_seg(d, g, &s, t, &mc, &mj);
		c = (unsigned)(mc / 1000 + 0.5);
	}
	if (fx->thermal) {
		uint32_t slow = nvmock_slowdown_c(d->s);
		c = slow != NA32 ? slow + 1 : d->s->temp_gpu + HEAT_C + 10;
	}
	return c;
}

// nvmock_slowdown_c is the temperature at which the board slows down: its
// slowdown threshold, or on a board that reports T.Limit instead (Ada and
// later) where the margin reaches the slowdown T.Limit offset; the higher
// of the two when it has both.
uint32_t nvmock_slowdown_c(const struct snap_device *s)
{
	uint32_t slow = s->temp_threshold[NVML_TEMPERATURE_THRESHOLD_SLOWDOWN];
	unsigned k = NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT - NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT;
	if (s->temp_tlimit != NA32 && s->temp_gpu != NA32 && (s->tlimit_offset_mask >> k & 1)) {
		long t = (long)s->temp_gpu + (long)s->temp_tlimit - (long)(int32_t)s->tlimit_offset[k];
		if (t > 0 && (slow == NA32 || (uint32_t)t > slow))
			slow = (uint32_t)t;
	}
	return slow;
}

// capped says whether a load asks for more power than the limit allows.
static int capped(const struct snap_device *s, uint32_t limit, unsigned load)
{
	return limit != NA32 && demand(s, load) > limit;
}

// held says whether a load holds the clocks back for power: the SW power
// cap of the event reasons, from the segment's load without its noise as
// energy and temperature take it.
static int held(const struct snap_device *s, uint32_t limit, unsigned load)
{
	return load >= 95 || capped(s, limit, load);
}

// nvmock_live_cut starts a new segment of the same load at now, where the
// readings stand, as the writer's SetLoad does (live/model.go): a change
// to the power limit then moves only what comes after it.
void nvmock_live_cut(const struct nvmock_dev *d, struct live_gpu *g, uint64_t now)
{
	if (!g->model)
		return;
	const struct snap_device *s = d->s;
	uint32_t limit = nvmock_power_limit(s, g);
	struct seg x = {g->load, g->since_ns, g->temp0_mc, g->energy0_mj, limit, g->viol0_ns};
	double temp;
	uint64_t e;
	at_seg(d, g, &x, now, &temp, &e);
	uint64_t v = g->viol0_ns;
	if (now > g->since_ns && held(s, limit, g->load[0]))
		v += now - g->since_ns - brake_ns(d, g, g->since_ns, now);
	memcpy(g->prev_load, g->load, sizeof g->load);
	g->prev_since_ns = g->since_ns, g->prev_temp0_mc = g->temp0_mc, g->prev_energy0_mj = g->energy0_mj;
	g->prev_viol0_ns = g->viol0_ns, g->prev_power_limit_mw = limit;
	g->since_ns = now, g->temp0_mc = (uint32_t)(temp + 0.5), g->energy0_mj = e, g->viol0_ns = v;
}

unsigned long long nvmock_live_energy(const struct nvmock_dev *d, const struct live_gpu *g, uint64_t t)
{
	if (!g->model) {
		unsigned long long mj = 0;
		nvmock_energy_mj(d->s, &mj);
		return mj;
	}
	struct seg s = seg_at(d->s, g, t);
	double mc;
	uint64_t mj;
	at_seg(d, g, &s, t, &mc, &mj);
	return mj;
}

// Clocks boost to the maximum under load, give way near the power limit,
// and drop in a slowdown.
uint32_t nvmock_live_clock(const struct nvmock_dev *d, const struct live_gpu *g, const struct live_fx *fx,
			   nvmlClockType_t type, uint64_t t)
{
	const struct snap_device *s = d->s;
	uint32_t idle = s->clock[type], max = s->max_clock[type];
	if (type == NVML_CLOCK_MEM || idle == NA32 || max == NA32)
		return nvmock_locked_clock(d, g, type, idle);
	unsigned u = nvmock_live_util(d->node_index, g, 0, t);
	double c = u == 0 ? idle : max;
	if (u >= 95)
		c = max * 0.95;
	// A locked range holds the clock the load asks for; power and
	// slowdowns still pull it down.
	c = nvmock_locked_clock(d, g, type, (uint32_t)c);
	// Held under a lowered power limit, clocks fall with the cube root of
	// the power the limit leaves (power goes as f V^2, and V with f).
	uint32_t limit = seg_at(s, g, t).limit;
	if (u > 0 && capped(s, limit, u)) {
		double k = 0.95 * cbrt(limit / demand(s, u));
		if (max * k < c)
			c = max * k;
	}
	// A slowdown caps the clock; it never raises an idle one.
	if (fx->thermal && c > max * 0.5)
		c = max * 0.5;
	if (fx->brake && c > max * 0.3)
		c = max * 0.3;
	return type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM ? nvmock_gfx_step(s, (uint32_t)c) : (uint32_t)c;
}

unsigned long long nvmock_live_reasons(const struct nvmock_dev *d, const struct live_gpu *g, const struct live_fx *fx,
				       uint64_t t)
{
	unsigned long long r = 0;
	unsigned u = nvmock_live_util(d->node_index, g, 0, t);
	if (u == 0 && !nvmock_idle_held(d, g))
		r |= nvmlClocksEventReasonGpuIdle;
	else if (!fx->brake && (u >= 95 || capped(d->s, seg_at(d->s, g, t).limit, u)))
		r |= nvmlClocksEventReasonSwPowerCap; // a brake keeps power well under the cap
	if (fx->thermal)
		r |= nvmlClocksThrottleReasonHwThermalSlowdown | nvmlClocksEventReasonSwThermalSlowdown | nvmlClocksThrottleReasonHwSlowdown;
	if (fx->brake)
		r |= nvmlClocksThrottleReasonHwPowerBrakeSlowdown | nvmlClocksThrottleReasonHwSlowdown;
	if (fx->thermal || fx->brake)
		r &= ~(unsigned long long)nvmlClocksEventReasonGpuIdle;
	return r & d->s->clock_reasons_supported;
}

// held_ns is how long the load model held the clocks back for power
// before end: what the segments before had counted (the writers add each
// segment's as they close it, live/model.go setLoadAt), and this one's.
static uint64_t held_ns(const struct nvmock_dev *d, const struct live_gpu *g, uint64_t end)
{
	const struct snap_device *s = d->s;
	if (!g->model)
		return 0;
	struct seg x = seg_at(s, g, end);
	uint64_t n = x.v0;
	if (end > x.since && held(s, x.limit, x.load[0]))
		n += end - x.since - (x.since == g->since_ns ? brake_ns(d, g, x.since, end) : 0);
	return n;
}

// nvmock_live_slowdown is how long, in ns up to t, a slowdown fault of a
// kind (thermal, power brake) has held the GPU: since the earliest active.
unsigned long long nvmock_live_slowdown(const struct nvmock_dev *d, const struct live_gpu *g, unsigned kind, uint64_t t)
{
	uint64_t first = t;
	for (unsigned i = 0; i < g->faults && i < STATE_FAULTS; i++) {
		uint64_t since;
		if (g->fault_kind[i] == kind && nvmock_live_active(d->node_index, g, i, t, &since) && since < first)
			first = since;
	}
	return t - first;
}

// nvmock_live_violation is the time, in ns up to t, a policy held the GPU
// below its applications clocks: power while the load meets the SW power
// cap (nvml.h makes the power policy's counter the SW power cap's), thermal
// while a thermal slowdown is on, and the longer of the two for the
// total. It is derived from the state (each segment's count at its start,
// and the faults' start times), so every process reads the same, but for
// a fault with a call or probability trigger, which fires per process.
// The power count never goes back; the thermal one ends with its fault.
// The model has nothing that sync boost, the board limit, low utilization
// or reliability would hold back, nor a base clock to fall below: those
// read 0; a power brake has a field of its own in nvml.h, not one of these
// policies.
unsigned long long nvmock_live_violation(const struct nvmock_dev *d, const struct live_gpu *g, nvmlPerfPolicyType_t policy,
					 uint64_t t)
{
	switch (policy) {
	case NVML_PERF_POLICY_POWER: return held_ns(d, g, t);
	case NVML_PERF_POLICY_THERMAL: return nvmock_live_slowdown(d, g, LIVE_FAULT_THERMAL, t);
	case NVML_PERF_POLICY_TOTAL_APP_CLOCKS: {
		// The longer of the two: their union would need the power time
		// of segments the state no longer keeps.
		uint64_t p = held_ns(d, g, t), th = nvmock_live_slowdown(d, g, LIVE_FAULT_THERMAL, t);
		return p > th ? p : th;
	}
	default: return 0;
	}
}

// nvmock_live_proc_alive says whether a registered process still runs: one
// registered from this pid namespace is checked in /proc; others are kept
// until their writer removes them. A zombie's GPU contexts ended with it,
// as its address space did: its exe link is gone (ENOENT) where another
// user's running process only refuses it (EACCES; review: zombies stayed
// listed, memory and all).
static int proc_alive(const struct live_proc *p)
{
	if (p->pidns == 0 || p->pidns != my_pidns)
		return 1;
	char path[32], target[1];
	snprintf(path, sizeof path, "/proc/%u/exe", p->pid);
	return readlink(path, target, sizeof target) >= 0 || errno != ENOENT;
}

// proc_table copies the process table (malloc'd; the caller frees it).
static struct live_proc *proc_table(void)
{
	if (nvmock.live == NULL || __atomic_load_n(&nvmock.live->procs, __ATOMIC_RELAXED) == 0)
		return NULL;
	struct live_proc *copy = malloc(STATE_PROCS * sizeof *copy);
	if (copy == NULL)
		return NULL;
	if (!nvmock_live_copy(copy, nvmock.live_procs, STATE_PROCS * sizeof *copy)) {
		free(copy);
		return NULL;
	}
	return copy;
}

// on says whether registered process p is one nvmock_live_procs_on asks
// for, and runs.
static int on(const struct live_proc *p, unsigned node, unsigned gi, unsigned ci, unsigned mask)
{
	if (p->pid == 0 || p->gpu != node || !(p->type & mask))
		return 0;
	if ((gi != LIVE_ANY && p->mig_gi != gi + 1) || (ci != LIVE_ANY && p->mig_ci != ci))
		return 0;
	return proc_alive(p);
}

// nvmock_live_procs_on lists the live processes whose type has a bit of
// mask on a GPU, on one of its GPU instances (gi), or on one MIG device
// (gi and ci); LIVE_ANY matches all. *n of them, in a malloc'd array the
// caller frees; NULL for none.
struct live_proc *nvmock_live_procs_on(unsigned node, unsigned gi, unsigned ci, unsigned mask, unsigned *n)
{
	*n = 0;
	struct live_proc *t = proc_table();
	if (t == NULL)
		return NULL;
	for (unsigned i = 0; i < STATE_PROCS; i++)
		if (on(&t[i], node, gi, ci, mask))
			t[(*n)++] = t[i];
	return t;
}

// nvmock_live_procs_in counts the same in a process table read under the
// writers' lock (MIG changes), where no copy is needed and none may fail.
unsigned nvmock_live_procs_in(const struct live_proc *table, unsigned node, unsigned gi, unsigned ci)
{
	unsigned n = 0;
	for (unsigned i = 0; i < STATE_PROCS; i++)
		n += on(&table[i], node, gi, ci, 3);
	return n;
}

struct live_proc *nvmock_live_procs(unsigned node, unsigned mask, unsigned *n)
{
	return nvmock_live_procs_on(node, LIVE_ANY, LIVE_ANY, mask, n);
}

// nvmock_live_gi_memory is the memory the live processes on a GPU
// instance use. Only MIG devices' memory asks, so no cache.
unsigned long long nvmock_live_gi_memory(unsigned node, unsigned gi)
{
	unsigned n;
	struct live_proc *p = nvmock_live_procs_on(node, gi, LIVE_ANY, 3, &n);
	unsigned long long sum = 0;
	for (unsigned i = 0; i < n; i++)
		sum += p[i].used_bytes;
	free(p);
	return sum;
}

unsigned long long nvmock_live_proc_memory(unsigned node)
{
	if (nvmock.live == NULL || node >= STATE_GPUS || __atomic_load_n(&nvmock.live->procs, __ATOMIC_RELAXED) == 0)
		return 0;
	uint64_t gen = __atomic_load_n(&nvmock.live->generation, __ATOMIC_ACQUIRE), now = mono_ns();
	uint32_t v = __atomic_load_n(&mem_cache.version, __ATOMIC_ACQUIRE);
	if (!(v & 1) && __atomic_load_n(&mem_cache.generation, __ATOMIC_ACQUIRE) == gen &&
	    now - __atomic_load_n(&mem_cache.at_ns, __ATOMIC_ACQUIRE) < 500000000ull) {
		unsigned long long s = __atomic_load_n(&mem_cache.sum[node], __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&mem_cache.version, __ATOMIC_RELAXED) == v)
			return s;
	}
	unsigned long long sum[STATE_GPUS] = {0};
	struct live_proc *t = proc_table();
	if (t == NULL)
		return 0;
	for (unsigned i = 0; i < STATE_PROCS; i++)
		if (t[i].pid != 0 && t[i].gpu < STATE_GPUS && proc_alive(&t[i]))
			sum[t[i].gpu] += t[i].used_bytes;
	free(t);
	if (!(v & 1) && __atomic_compare_exchange_n(&mem_cache.version, &v, v + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		for (unsigned i = 0; i < STATE_GPUS; i++)
			__atomic_store_n(&mem_cache.sum[i], sum[i], __ATOMIC_RELEASE);
		__atomic_store_n(&mem_cache.generation, gen, __ATOMIC_RELEASE);
		__atomic_store_n(&mem_cache.at_ns, now, __ATOMIC_RELEASE);
		__atomic_store_n(&mem_cache.version, v + 2, __ATOMIC_RELEASE);
	}
	return sum[node];
}

// nvmock_live_proc_name is the name a process was registered with.
int nvmock_live_proc_name(unsigned pid, char *out, size_t len)
{
	struct live_proc *t = proc_table();
	if (t == NULL)
		return 0;
	int found = 0;
	for (unsigned i = 0; i < STATE_PROCS && !found; i++) {
		if (t[i].pid == pid && t[i].name[0] != '\0' && proc_alive(&t[i])) {
			snprintf(out, len, "%.*s", (int)sizeof t[i].name, t[i].name);
			found = 1;
		}
	}
	free(t);
	return found;
}
