// Event sets. Events come from the node's live state (live.c): XIDs and ECC
// errors that nvmock ctl publishes in the shared ring, and the events of
// injected faults as they take effect, so a process waiting here sees what
// any other process on the node injected. Without live state no event ever
// fires, but the calls work as clients (nvidia-smi's default view, the
// device plugin's health check) need.
#define _GNU_SOURCE
#include <linux/futex.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nvmock.h"

#define SENT_MAX 64

// NVML is thread-safe, so threads may wait on one set while another
// registers on it: mask is atomic, and what a wait advances (from
// ring_seen on) is kept under busy, a spin flag the wait holds while it
// looks, never while it sleeps. A child forked while a thread held it
// clears it (nvmock_events_in_child): no mutex would survive that.
struct nvmlEventSet_st {
	unsigned long long mask[STATE_GPUS]; // registered event types by node index
	int busy;
	uint32_t ring_seen;                  // ring events up to here are not this set's
	uint64_t created_ns;
	// Fault events already delivered: fault id and which of its events.
	uint32_t sent_id[SENT_MAX];
	uint8_t sent_bits[SENT_MAX];
	unsigned sent_next;
};

// Live sets sit in a table so a foreign handle is recognised without
// dereferencing it. The table is lock-free: a mutex held by another thread
// at fork() would stay locked forever in the child. A set's memory is a
// slot of a static pool, never freed: a thread still waiting on a set
// another one frees reads a slot, not freed memory, and stops waiting.
#define MAX_SETS 256
static struct nvmlEventSet_st *sets[MAX_SETS];
static struct nvmlEventSet_st pool[MAX_SETS];

static void set_lock(struct nvmlEventSet_st *s)
{
	for (unsigned tries = 0; __atomic_exchange_n(&s->busy, 1, __ATOMIC_ACQUIRE); tries++) {
		if (tries < 1000) {
			nvmock_relax();
			continue;
		}
		struct timespec ts = {0, 50000}; // the holder may wait out a stalled writer (live.c)
		nanosleep(&ts, NULL);
	}
}

static void set_unlock(struct nvmlEventSet_st *s) { __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE); }

void nvmock_events_in_child(void)
{
	for (int i = 0; i < MAX_SETS; i++)
		__atomic_store_n(&pool[i].busy, 0, __ATOMIC_RELAXED);
}

static int set_ok(nvmlEventSet_t set)
{
	for (int i = 0; i < MAX_SETS && set.handle != NULL; i++)
		if (__atomic_load_n(&sets[i], __ATOMIC_ACQUIRE) == set.handle)
			return 1;
	return 0;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(set);
	// A slot is taken by a reservation first, so no other Create fills it
	// while it is made ready.
	struct nvmlEventSet_st *taken = (struct nvmlEventSet_st *)&sets;
	for (int i = 0; i < MAX_SETS; i++) {
		struct nvmlEventSet_st *empty = NULL;
		if (!__atomic_compare_exchange_n(&sets[i], &empty, taken, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		// A thread still waiting on the set freed from this slot may
		// be looking at it: reset it under its flag.
		struct nvmlEventSet_st *s = &pool[i];
		set_lock(s);
		for (unsigned k = 0; k < STATE_GPUS; k++)
			__atomic_store_n(&s->mask[k], 0, __ATOMIC_RELAXED);
		memset(&s->ring_seen, 0, sizeof *s - offsetof(struct nvmlEventSet_st, ring_seen));
		s->created_ns = nvmock_live_now();
		const struct live_header *live = nvmock.live;
		if (live != NULL)
			s->ring_seen = __atomic_load_n(&live->ring, __ATOMIC_ACQUIRE);
		set_unlock(s);
		__atomic_store_n(&sets[i], s, __ATOMIC_RELEASE);
		set->handle = s;
		return NVML_SUCCESS;
	}
	return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	for (int i = 0; i < MAX_SETS && set.handle != NULL; i++) {
		struct nvmlEventSet_st *live = set.handle;
		if (__atomic_compare_exchange_n(&sets[i], &live, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return NVML_SUCCESS;
	}
	return NVML_ERROR_INVALID_ARGUMENT;
}

static unsigned long long supported_events(const struct nvmock_dev *d)
{
	unsigned long long t = nvmlEventTypeXidCriticalError | nvmlEventTypeClock;
	if (d->s->ecc_current != NA32)
		t |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
	return t;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
	DEV(device, d);
	OUT(eventTypes);
	*eventTypes = supported_events(d);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
	DEV(device, d);
	if (!set_ok(set))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (eventTypes & ~supported_events(d))
		return NVML_ERROR_NOT_SUPPORTED;
	if (d->node_index < STATE_GPUS)
		__atomic_or_fetch(&set.handle->mask[d->node_index], eventTypes, __ATOMIC_RELEASE);
	return NVML_SUCCESS;
}

// visible is this process's device for a node index, or NULL.
static const struct nvmock_dev *visible(unsigned node)
{
	for (unsigned i = 0; i < nvmock.ndevs; i++)
		if (nvmock.devs[i].node_index == node)
			return &nvmock.devs[i];
	return NULL;
}

// channel_xid says whether an XID is an error of a process's channel,
// which the driver charges to that process: live/xidtext.go's
// channelXIDs, which xidlog logs with the process's instances.
static int channel_xid(unsigned long long xid)
{
	static const unsigned short ids[] = {13, 31, 32, 43, 45, 68, 69, 109};
	for (unsigned i = 0; i < sizeof ids / sizeof ids[0]; i++)
		if (xid == ids[i])
			return 1;
	return 0;
}

static void fill(nvmlEventData_t *out, const struct nvmock_dev *d, unsigned long long type, unsigned long long data)
{
	out->device = nvmock_handle(d);
	out->eventType = type;
	out->eventData = data;
	out->gpuInstanceId = 0xffffffffu; // not attributable to a MIG instance
	out->computeInstanceId = 0xffffffffu;
	if (type != nvmlEventTypeXidCriticalError || !channel_xid(data))
		return;
	// A channel error is the first process's on the GPU, as xidlog charges
	// it (live.ChargedTo); on a MIG device, its instances (nvml.h: ids of
	// an XID attributable to a GPU instance; review: the log named them,
	// the event did not).
	unsigned n;
	struct live_proc *p = nvmock_live_procs(d->node_index, 3, &n);
	if (n > 0 && p[0].mig_gi != 0) {
		out->gpuInstanceId = p[0].mig_gi - 1;
		out->computeInstanceId = p[0].mig_ci;
	}
	free(p);
}

// from_ring takes the next published event this set registered for.
static int from_ring(struct nvmlEventSet_st *s, nvmlEventData_t *out)
{
	uint32_t n = __atomic_load_n(&nvmock.live->ring, __ATOMIC_ACQUIRE);
	if (n - s->ring_seen > STATE_EVENTS) // overrun: the oldest are gone
		s->ring_seen = n - STATE_EVENTS;
	while (s->ring_seen != n) {
		uint32_t k = s->ring_seen;
		struct live_event e;
		if (!nvmock_live_copy(&e, &nvmock.live_events[k % STATE_EVENTS], sizeof e))
			return 0;
		// Not held back by its time: one published when the state's clock
		// stood later (frozen ahead, then thawed) happened, and those
		// after it with it (review).
		s->ring_seen = k + 1;
		if (e.serial != (uint64_t)k + 1 || e.gpu >= STATE_GPUS || !(__atomic_load_n(&s->mask[e.gpu], __ATOMIC_ACQUIRE) & e.type))
			continue;
		const struct nvmock_dev *d = visible(e.gpu);
		if (d == NULL)
			continue;
		fill(out, d, e.type, e.data);
		return 1;
	}
	return 0;
}

// sent_bits_of is where a set records what it delivered of fault id.
static uint8_t *sent_bits_of(struct nvmlEventSet_st *s, uint32_t id)
{
	for (unsigned i = 0; i < SENT_MAX; i++)
		if (s->sent_id[i] == id)
			return &s->sent_bits[i];
	unsigned i = s->sent_next++ % SENT_MAX;
	s->sent_id[i] = id;
	s->sent_bits[i] = 0;
	return &s->sent_bits[i];
}

// from_faults takes the next event of a fault that took effect after the
// set was made; *wake is set to when the next pending one does.
static int from_faults(struct nvmlEventSet_st *s, uint64_t now, nvmlEventData_t *out, uint64_t *wake)
{
	for (unsigned node = 0; node < nvmock.hdr->device_count && node < STATE_GPUS; node++) {
		unsigned long long mask = __atomic_load_n(&s->mask[node], __ATOMIC_ACQUIRE);
		if (mask == 0)
			continue;
		struct live_gpu g;
		if (!nvmock_live_read(node, &g) || g.faults == 0)
			continue;
		const struct nvmock_dev *d = visible(node);
		if (d == NULL)
			continue;
		for (unsigned i = 0; i < g.faults && i < STATE_FAULTS; i++) {
			uint64_t since;
			if (!nvmock_live_active(node, &g, i, now, &since)) {
				if (g.fault_trigger[i] == LIVE_TRIGGER_AT && g.fault_param[i] > now && g.fault_param[i] < *wake)
					*wake = g.fault_param[i];
				continue;
			}
			if (since < s->created_ns)
				continue; // it happened before anyone listened
			// What the fault reports: its XID, then the ECC error event.
			unsigned long long types[2] = {g.fault_xid[i] ? nvmlEventTypeXidCriticalError : 0, 0};
			if (g.fault_kind[i] == LIVE_FAULT_ECC && g.fault_count[i] > 0)
				types[1] = nvmlEventTypeDoubleBitEccError;
			if (g.fault_kind[i] == LIVE_FAULT_SBE)
				types[1] = nvmlEventTypeSingleBitEccError;
			uint8_t *bits = sent_bits_of(s, g.fault_id[i]);
			for (unsigned k = 0; k < 2; k++) {
				if (types[k] == 0 || (*bits >> k & 1) || !(mask & types[k]))
					continue;
				*bits |= 1u << k;
				fill(out, d, types[k], k == 0 ? g.fault_xid[i] : 0);
				return 1;
			}
		}
	}
	return 0;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (!set_ok(set) || data == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (nvmock.live == NULL) {
		// Wait the full timeout as a quiet GPU would, so pollers do not spin.
		poll(NULL, 0, timeoutms > 0x7fffffffu ? 0x7fffffff : (int)timeoutms);
		return NVML_ERROR_TIMEOUT;
	}
	struct nvmlEventSet_st *s = set.handle;
	const struct live_header *live = nvmock.live;
	uint64_t end = mono_ms() + timeoutms;
	for (;;) {
		// Another thread may shut the library down or free the set
		// meanwhile: the wait ends as a call made then would.
		if (!nvmock_ready() || nvmock.live != live)
			return NVML_ERROR_UNINITIALIZED;
		if (!set_ok(set))
			return NVML_ERROR_INVALID_ARGUMENT;
		uint32_t wake_word = __atomic_load_n(&live->wake, __ATOMIC_ACQUIRE);
		uint64_t now = nvmock_live_now(), next = UINT64_MAX;
		set_lock(s);
		int got = from_ring(s, data) || from_faults(s, now, data, &next);
		set_unlock(s);
		if (got)
			return NVML_SUCCESS;
		uint64_t t = mono_ms();
		if (t >= end)
			return NVML_ERROR_TIMEOUT;
		// Sleep until a writer wakes us, a timed fault is due, or 100 ms
		// pass (triggers that fire on other threads' calls wake no one).
		uint64_t ms = end - t;
		if (ms > 100)
			ms = 100;
		if (next != UINT64_MAX && (next - now) / 1000000 < ms)
			ms = (next - now) / 1000000 + 1;
		struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
		syscall(SYS_futex, &live->wake, FUTEX_WAIT, wake_word, &ts, NULL, 0);
	}
}

NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	// The first event struct ended after eventData: write no further.
	if (data == NULL)
		return nvmlEventSetWait_v2(set, data, timeoutms);
	nvmlEventData_t full;
	nvmlReturn_t r = nvmlEventSetWait_v2(set, &full, timeoutms);
	if (r == NVML_SUCCESS)
		memcpy(data, &full, offsetof(nvmlEventData_t, gpuInstanceId));
	return r;
}
