package nri

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons in the errors_total and skipped_total metrics.
const (
	reasonProbe      = "probe"      // the overlay could not be read
	reasonDecide     = "decide"     // inject.Decide returned an error
	reasonPanic      = "panic"      // handling a container panicked
	reasonNamespaces = "namespaces" // the namespace list could not be fetched
	reasonSync       = "sync"       // rebuilding use counts at Synchronize failed
	reasonProcess    = "process"    // a GPU process could not be shown or removed (live state)
	reasonInUse      = "in_use"     // the overlays in use could not be recorded (hostprep.InUseFile)

	skipNotSelected = "not_selected" // the decision left the container alone
	skipNoOverlay   = "no_overlay"   // no overlay is installed on the node
	skipFailed      = "failed"       // an error left the container alone
	skipAnother     = "another"      // another nvmock plugin injected it (a rolling update's overlap)
)

// metrics are the plugin's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg        *prometheus.Registry
	injections prometheus.Counter
	skipped    *prometheus.CounterVec
	errors     *prometheus.CounterVec
	warnings   prometheus.Counter
	refused    prometheus.Counter
	decision   prometheus.Histogram

	// Children resolved once: the create path does not look labels up.
	skipNotSelected, skipNoOverlay, skipFailed, skipAnother prometheus.Counter
}

func newMetrics() *metrics {
	const ns, sub = "nvmock", "nri"
	m := &metrics{
		reg: prometheus.NewRegistry(),
		injections: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "injections_total",
			Help: "Containers given mock GPUs."}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "skipped_total",
			Help: "Containers left untouched, by reason."}, []string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "errors_total",
			Help: "Errors, each leaving a container untouched or keeping old state, by reason."}, []string{"reason"}),
		warnings: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "warnings_total",
			Help: "Warnings from the decision (a default GPU request the node cannot meet, say)."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "refused_total",
			Help: "Containers failed as they start (or are created, on an older overlay): their pod asked for GPUs the node does not have."}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "decision_seconds",
			Help:    "Time to handle one CreateContainer: decision and NRI adjustment.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10)}),
	}
	m.skipNotSelected = m.skipped.WithLabelValues(skipNotSelected)
	m.skipNoOverlay = m.skipped.WithLabelValues(skipNoOverlay)
	m.skipFailed = m.skipped.WithLabelValues(skipFailed)
	m.skipAnother = m.skipped.WithLabelValues(skipAnother)
	for _, r := range []string{reasonProbe, reasonDecide, reasonPanic, reasonNamespaces, reasonSync, reasonProcess, reasonInUse} {
		m.errors.WithLabelValues(r) // present at zero, so alerts can rate() them
	}
	m.reg.MustRegister(m.injections, m.skipped, m.errors, m.warnings, m.refused, m.decision,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}
