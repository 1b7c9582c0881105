// Command gen writes Meridian's Grafana dashboards (dashboards.Boards) as
// JSON files into a folder, dashboards/grafana by default, or with -check
// compares them with what is there and exits 1 naming every stale,
// missing or extra file. make dashboards runs it; make verify runs it
// with -check. It writes nothing outside the folder and reads no network.
package main
