package agent

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meridian-gpu/meridian/transport/natsbus"
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
	connErrors    *prometheus.CounterVec

	credsMu sync.Mutex
	creds   *credentialCollector
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
			Help: "Advertisements sent, by kind (full, delta); asked counts the full ones sent because a hub asked (also counted as full)."}, []string{"kind"}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_agent_heartbeats_total", Help: "Heartbeats sent."}),
		outbox:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_agent_outbox_events", Help: "Events waiting to be stored."}),
		held:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_agent_held_dispatches", Help: "Dispatches launched and not yet reported finished."}),
		connected:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_agent_nats_connected", Help: "1 while connected to NATS."}),
		connErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_agent_connector_errors_total",
			Help: "Connector calls that failed with a fault (rejections and cancelled calls are not faults), by operation (inventory, launch, cancel, list)."}, []string{"operation"}),
	}
	// Every labelled series exists from the start, so rate() and the
	// dashboards work before the first event of each kind.
	for _, op := range connectorOps {
		m.connErrors.WithLabelValues(op)
	}
	for _, r := range []string{"accepted", "rejected", "duplicate", "error"} {
		m.launches.WithLabelValues(r)
	}
	for _, w := range []string{"event", "advert", "delta", "heartbeat"} {
		m.publishErrors.WithLabelValues(w)
	}
	for _, k := range []string{"full", "delta"} {
		m.adverts.WithLabelValues(k)
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
	f(m.connErrors)
	return m
}

// connectorOps are the values of meridian_agent_connector_errors_total's
// operation label.
var connectorOps = []string{"inventory", "launch", "cancel", "list"}

// connectorError counts a connector call's fault and returns err: a
// rejection is the cluster's answer, not a fault, and a call cut short by
// the agent's own context is not the backend's.
func (m *Metrics) connectorError(op string, err error) error {
	if err != nil && !IsRejected(err) && !errors.Is(err, context.Canceled) {
		m.connErrors.WithLabelValues(op).Inc()
	}
	return err
}

// WatchCredentialFiles exports when the agent's NATS credentials expire,
// as meridian_agent_credential_expiry_timestamp_seconds: the user JWT of
// credsFile (a .creds file) and the client certificate of certFile (PEM).
// Either may be empty (not used). The files are read at each scrape, so a
// rotated file is seen; one that cannot be read, or a JWT without an
// expiry, exports no series. A second call replaces the first.
func (m *Metrics) WatchCredentialFiles(credsFile, certFile string) {
	m.credsMu.Lock()
	defer m.credsMu.Unlock()
	if m.creds == nil {
		m.creds = &credentialCollector{}
		m.reg.MustRegister(m.creds)
	}
	m.creds.set(credsFile, certFile)
}

var descCredExpiry = prometheus.NewDesc("meridian_agent_credential_expiry_timestamp_seconds",
	"When a credential the agent presents to NATS expires, in seconds since the epoch, by credential (nats_user_jwt, nats_client_cert).",
	[]string{"credential"}, nil)

type credentialCollector struct {
	mu              sync.Mutex
	creds, certFile string
}

func (c *credentialCollector) set(creds, cert string) {
	c.mu.Lock()
	c.creds, c.certFile = creds, cert
	c.mu.Unlock()
}

func (c *credentialCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descCredExpiry }

func (c *credentialCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	creds, cert := c.creds, c.certFile
	c.mu.Unlock()
	if creds != "" {
		if at, ok, err := natsbus.CredsFileExpiry(creds); err == nil && ok {
			ch <- prometheus.MustNewConstMetric(descCredExpiry, prometheus.GaugeValue, float64(at.Unix()), "nats_user_jwt")
		}
	}
	if cert != "" {
		if at, err := natsbus.CertFileExpiry(cert); err == nil {
			ch <- prometheus.MustNewConstMetric(descCredExpiry, prometheus.GaugeValue, float64(at.Unix()), "nats_client_cert")
		}
	}
}

// Registry is where the metrics are registered.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
