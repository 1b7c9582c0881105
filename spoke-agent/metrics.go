package agent

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the agent's Prometheus metrics.
type Metrics struct {
	reg           *prometheus.Registry
	received      *prometheus.CounterVec
	launches      *prometheus.CounterVec
	events        *prometheus.CounterVec
	publishErrors *prometheus.CounterVec
	adverts       *prometheus.CounterVec
	heartbeats    prometheus.Counter
	outbox        prometheus.Gauge
	held          prometheus.Gauge
	connected     prometheus.Gauge
}

// NewMetrics registers the agent's metrics on reg; nil means a new private
// registry.
func NewMetrics(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{
		reg: reg,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_agent_hub_messages_total",
			Help: "Messages received on the dispatch subject, by kind (dispatch, cancel, unknown, undecodable)."}, []string{"kind"}),
		launches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_agent_launches_total",
			Help: "Dispatch launch outcomes (accepted, rejected, duplicate, error)."}, []string{"result"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_agent_events_stored_total",
			Help: "Dispatch events stored on the EVENTS stream, by type."}, []string{"type"}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_agent_publish_errors_total",
			Help: "Failed publishes (retried later), by what (event, advert, delta, heartbeat)."}, []string{"what"}),
		adverts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_agent_advertisements_total",
			Help: "Advertisements sent, by kind (full, delta)."}, []string{"kind"}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_agent_heartbeats_total", Help: "Heartbeats sent."}),
		outbox:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_agent_outbox_events", Help: "Events waiting to be stored."}),
		held:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_agent_held_dispatches", Help: "Dispatches launched and not yet reported finished."}),
		connected:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_agent_nats_connected", Help: "1 while connected to NATS."}),
	}
	f(m.received)
	f(m.launches)
	f(m.events)
	f(m.publishErrors)
	f(m.adverts)
	f(m.heartbeats)
	f(m.outbox)
	f(m.held)
	f(m.connected)
	return m
}

// Registry is where the metrics are registered.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
