package config

import (
	"strings"
	"testing"
)

func TestSpokeAuthSettingsNameTheField(t *testing.T) {
	for name, tc := range map[string]struct {
		set  func(*HubConfiguration)
		want string // "" = valid
	}{
		"embedded":              {func(c *HubConfiguration) { c.NATS.SpokeAuth.Enabled = true }, ""},
		"external with files":   {func(c *HubConfiguration) { external(c) }, ""},
		"external without keys": {func(c *HubConfiguration) { external(c); c.NATS.SpokeAuth.OperatorSigningKeyFile = "" }, "nats.spokeAuth.operatorSigningKeyFile"},
		"external without sys":  {func(c *HubConfiguration) { external(c); c.NATS.SpokeAuth.SystemCredsFile = "" }, "nats.spokeAuth.systemCredsFile"},
		"files but off": {func(c *HubConfiguration) {
			c.NATS.SpokeAuth.SystemCredsFile = "sys.creds"
		}, "nats.spokeAuth.enabled"},
		"files with embedded": {func(c *HubConfiguration) {
			c.NATS.SpokeAuth.Enabled, c.NATS.SpokeAuth.OperatorSigningKeyFile = true, "op.nk"
		}, "nats.spokeAuth.operatorSigningKeyFile"},
		"hub creds too": {func(c *HubConfiguration) { external(c); c.NATS.CredsFile = "hub.creds" }, "nats.credsFile"},
	} {
		t.Run(name, func(t *testing.T) {
			c := Default()
			c.DataDir = "/var/lib/meridian"
			tc.set(c)
			errs := Validate(c, Options{})
			got := errs.Error()
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("unexpected errors: %s", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("errors %q do not name %s", got, tc.want)
			}
		})
	}
}

func external(c *HubConfiguration) {
	c.NATS.URL = "nats://nats.internal:4222"
	c.NATS.SpokeAuth = NATSSpokeAuth{Enabled: true, OperatorSigningKeyFile: "op.nk", SystemCredsFile: "sys.creds"}
}
