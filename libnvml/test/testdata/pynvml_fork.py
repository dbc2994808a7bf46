"""Drive the mock libnvidia-ml through Debian's pynvml from forked workers.

The parent calls nvmlInit, then a multiprocessing pool (fork start method)
runs one task per worker: nvmlInit again in the child, a stream of getter
calls over every GPU (name, memory, temperature, UUID) checked against the
expected values, nvmlShutdown. Run by libnvml/test/abi_test.go as

    /usr/bin/python3 pynvml_fork.py '<json>'

with the JSON object {"workers": 8, "calls": 20000, "timeout": 120,
"gpus": [{"name": ..., "uuid": ..., "total": ..., "used": ..., "free": ...,
"temperature": ...}, ...]} (memory in bytes as nvmlMemory_t v1 reports it).
Prints one result line and exits 0, or lists the mismatches and exits 1.
"""

import json
import multiprocessing
import os
import sys

import pynvml


def text(v):
    """pynvml returns bytes or str depending on its version."""
    return v.decode() if isinstance(v, bytes) else v


def worker(args):
    index, calls, gpus = args
    problems = []
    pynvml.nvmlInit()
    try:
        if pynvml.nvmlDeviceGetCount() != len(gpus):
            problems.append(f"worker {index}: {pynvml.nvmlDeviceGetCount()} GPUs, want {len(gpus)}")
            return os.getpid(), 0, problems
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(len(gpus))]
        made = 0
        for i in range(calls):
            g = i % len(gpus)
            want = gpus[g]
            h = handles[g]
            op = (i // len(gpus)) % 4
            if op == 0:
                got, exp = text(pynvml.nvmlDeviceGetName(h)), want["name"]
            elif op == 1:
                m = pynvml.nvmlDeviceGetMemoryInfo(h)
                got, exp = (m.total, m.used, m.free), (want["total"], want["used"], want["free"])
            elif op == 2:
                got = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
                exp = want["temperature"]
            else:
                got, exp = text(pynvml.nvmlDeviceGetUUID(h)), want["uuid"]
            made += 1
            if got != exp and len(problems) < 10:
                problems.append(f"worker {index} call {i} GPU {g} op {op}: got {got!r}, want {exp!r}")
        return os.getpid(), made, problems
    except pynvml.NVMLError as e:
        problems.append(f"worker {index}: {e}")
        return os.getpid(), 0, problems
    finally:
        pynvml.nvmlShutdown()


def main():
    cfg = json.loads(sys.argv[1])
    workers, calls, gpus = cfg["workers"], cfg["calls"], cfg["gpus"]
    # Initialise in the parent first: the children inherit the library's state.
    pynvml.nvmlInit()
    parent = text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        results = pool.map_async(worker, [(i, calls, gpus) for i in range(workers)], chunksize=1).get(cfg["timeout"])
    problems = [p for _, _, ps in results for p in ps]
    if parent != gpus[0]["uuid"]:
        problems.append(f"parent: GPU 0 UUID {parent!r}, want {gpus[0]['uuid']!r}")
    # The parent still works after its children re-initialised and shut down.
    if text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))) != parent:
        problems.append("parent: GPU 0 UUID changed after the workers ran")
    pynvml.nvmlShutdown()
    made = sum(n for _, n, _ in results)
    pids = len({pid for pid, _, _ in results})
    for p in problems:
        print(f"pynvml_fork: {p}")
    print(f"pynvml_fork: {workers} workers ({pids} processes) x {calls} calls: {made} calls, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
