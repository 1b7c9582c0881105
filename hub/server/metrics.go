package server

import (
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// metricsHandler serves /metrics: the hub's own registry, plus, when etcd
// runs embedded in this process, etcd's own etcd_* metrics (etcd registers
// them on the process-wide default registry). With an external etcd those
// same names come from scraping etcd itself, so the dashboards and rules
// work either way. It registers the NATS connection's collector and the
// build info on the hub's registry.
func (s *Server) metricsHandler() http.Handler {
	s.reg.MustRegister(natsCollector{s.bus.Conn}, buildInfo(s.cfg.Version))
	gs := prometheus.Gatherers{s.reg}
	if s.etcd != nil {
		gs = append(gs, prefixGatherer{prometheus.DefaultGatherer, "etcd_"})
	}
	if s.cfg.Secrets != nil {
		gs = append(gs, s.cfg.Secrets.Gatherer())
	}
	var g prometheus.Gatherer = gs
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{Registry: s.reg})
}

// prefixGatherer keeps the families whose names start with prefix.
type prefixGatherer struct {
	g      prometheus.Gatherer
	prefix string
}

func (p prefixGatherer) Gather() ([]*dto.MetricFamily, error) {
	fams, err := p.g.Gather()
	out := fams[:0]
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), p.prefix) {
			out = append(out, f)
		}
	}
	return out, err
}

func buildInfo(version string) prometheus.Collector {
	if version == "" {
		version = "unknown"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_hub_build_info",
		Help: "Always 1; the version label is the hub's version.", ConstLabels: prometheus.Labels{"version": version}})
	g.Set(1)
	return g
}

// natsCollector reports the hub's NATS connection from the client's own
// counters (no request to the server).
type natsCollector struct{ conn func() *nats.Conn }

var (
	descNATSConnected = prometheus.NewDesc("meridian_hub_nats_connected", "1 while the hub's NATS connection is up.", nil, nil)
	descNATSReconnect = prometheus.NewDesc("meridian_hub_nats_reconnects_total", "Times the hub's NATS connection reconnected.", nil, nil)
	descNATSMsgs      = prometheus.NewDesc("meridian_hub_nats_messages_total", "Messages the hub's NATS connection sent or received, by direction (in, out).", []string{"direction"}, nil)
	descNATSBytes     = prometheus.NewDesc("meridian_hub_nats_bytes_total", "Bytes the hub's NATS connection sent or received, by direction (in, out).", []string{"direction"}, nil)
)

func (natsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNATSConnected, descNATSReconnect, descNATSMsgs, descNATSBytes} {
		ch <- d
	}
}

func (c natsCollector) Collect(ch chan<- prometheus.Metric) {
	nc := c.conn()
	if nc == nil {
		return
	}
	up := 0.0
	if nc.Status() == nats.CONNECTED {
		up = 1
	}
	st := nc.Stats()
	ch <- prometheus.MustNewConstMetric(descNATSConnected, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(descNATSReconnect, prometheus.CounterValue, float64(st.Reconnects))
	ch <- prometheus.MustNewConstMetric(descNATSMsgs, prometheus.CounterValue, float64(st.InMsgs), "in")
	ch <- prometheus.MustNewConstMetric(descNATSMsgs, prometheus.CounterValue, float64(st.OutMsgs), "out")
	ch <- prometheus.MustNewConstMetric(descNATSBytes, prometheus.CounterValue, float64(st.InBytes), "in")
	ch <- prometheus.MustNewConstMetric(descNATSBytes, prometheus.CounterValue, float64(st.OutBytes), "out")
}
