"""Reads the live state through pynvml, as a monitor would.

Usage: pynvml_live.py read     print GPU 0's readings and processes, one line
       pynvml_live.py events   register every GPU, print "ready", then print
                               each event that arrives within 20 s
"""
import sys
import time

import pynvml


def name(pid):
    n = pynvml.nvmlSystemGetProcessName(pid)
    return n.decode() if isinstance(n, bytes) else n


def read():
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    u = pynvml.nvmlDeviceGetUtilizationRates(h)
    temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    power = pynvml.nvmlDeviceGetPowerUsage(h)
    procs = ",".join("%d:%d:%s" % (p.pid, p.usedGpuMemory >> 20, name(p.pid))
                     for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
    try:
        pynvml.nvmlDeviceGetHandleByIndex(1)
        lost = "no"
    except pynvml.NVMLError_GpuIsLost:
        lost = "yes"
    print("util=%d temp=%d power=%d procs=%s gpu1_lost=%s" % (u.gpu, temp, power, procs, lost))


def events():
    s = pynvml.nvmlEventSetCreate()
    for i in range(pynvml.nvmlDeviceGetCount()):
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
        except pynvml.NVMLError_GpuIsLost:
            continue
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlDeviceGetSupportedEventTypes(h), s)
    print("ready", flush=True)
    end = time.time() + 20
    while time.time() < end:
        try:
            e = pynvml.nvmlEventSetWait(s, 1000)
        except pynvml.NVMLError_Timeout:
            continue
        print("event gpu=%d type=%#x data=%d" % (pynvml.nvmlDeviceGetIndex(e.device), e.eventType, e.eventData), flush=True)
    pynvml.nvmlEventSetFree(s)


def main():
    pynvml.nvmlInit()
    try:
        {"read": read, "events": events}[sys.argv[1]]()
    finally:
        pynvml.nvmlShutdown()


main()
