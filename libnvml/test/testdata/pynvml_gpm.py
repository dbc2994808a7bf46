# GPM through pynvml (nvidia-ml-py 11.525: a 98-metric array), as a
# monitoring agent reads it: support, two samples, the metrics between.
import pynvml as n

n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    if not n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
        out.append("gpu%d=none" % i)
        continue
    a, b = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    n.nvmlGpmSampleGet(h, a)
    n.nvmlGpmSampleGet(h, b)
    m = n.c_nvmlGpmMetricsGet_t()
    m.version = n.NVML_GPM_METRICS_GET_VERSION
    m.sample1, m.sample2 = a, b
    ids = [n.NVML_GPM_METRIC_SM_UTIL, n.NVML_GPM_METRIC_DRAM_BW_UTIL, n.NVML_GPM_METRIC_SM_OCCUPANCY]
    m.numMetrics = len(ids)
    for j, id in enumerate(ids):
        m.metrics[j].metricId = id
    n.nvmlGpmMetricsGet(m)
    vals = []
    for j in range(len(ids)):
        r = m.metrics[j]
        vals.append("%g" % r.value if r.nvmlReturn == 0 else "err%d" % r.nvmlReturn)
    out.append("gpu%d=%s" % (i, ",".join(vals)))
    n.nvmlGpmSampleFree(a)
    n.nvmlGpmSampleFree(b)
print(" ".join(out))
n.nvmlShutdown()
