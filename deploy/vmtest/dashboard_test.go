package vmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ackflow/ackflow/metrics"
)

// dashboardPath is the Grafana dashboard under test.
const dashboardPath = "../grafana/ackflow.json"

// dashboardFamilies returns the metric families the dashboard's queries
// use: histograms by their family name (without _bucket, _sum, _count).
func dashboardFamilies(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s is not a dashboard: %v", dashboardPath, err)
	}
	names := regexp.MustCompile(`\backflow_[a-z0-9_]+`)
	seen := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			found := names.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q queries %q, which uses no ackflow metric", p.Title, tg.Expr)
			}
			for _, n := range found {
				if base, ok := strings.CutSuffix(n, "_bucket"); ok {
					n = base
				}
				seen[n] = true
			}
		}
	}
	if len(seen) == 0 {
		t.Fatalf("%s queries no ackflow metric", dashboardPath)
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestDashboardUsesExportedNames checks the dashboard against the names
// ackflow declares, without a cluster.
func TestDashboardUsesExportedNames(t *testing.T) {
	for _, n := range dashboardFamilies(t) {
		if !slices.Contains(metrics.Names(), n) {
			t.Errorf("%s queries %s, which ackflow does not export (metrics.Names)", dashboardPath, n)
		}
	}
}

// checkDashboardScraped scrapes the workers' /metrics and checks that every
// family the dashboard queries is there, with a series of topology topo.
func checkDashboardScraped(t *testing.T, addrs []string, topo string) {
	t.Helper()
	want := dashboardFamilies(t)
	var missing []string
	eventually(t, 30*time.Second, "every dashboard metric in the workers' /metrics", func() error {
		have := map[string]bool{}
		for _, addr := range addrs {
			fams, err := scrape(addr)
			if err != nil {
				return err
			}
			for name, f := range fams {
				for _, m := range f.Metric {
					for _, l := range m.Label {
						if l.GetName() == "topology" && l.GetValue() == topo {
							have[name] = true
						}
					}
				}
			}
		}
		missing = missing[:0]
		for _, n := range want {
			if !have[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no worker exports %s for topology %s", strings.Join(missing, ", "), topo)
		}
		return nil
	})
}

func scrape(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}
