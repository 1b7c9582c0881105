package embednats

import (
	"crypto/tls"
	"strings"
	"testing"
)

func TestSecurityRefusesBadCombinations(t *testing.T) {
	for name, tc := range map[string]struct {
		sec  Security
		want string
	}{
		"token and users":       {Security{Token: "t", Users: map[string]string{"a": "b"}}, "Token cannot be combined"},
		"operator and token":    {Security{Token: "t", TrustedKeys: []string{"OABC"}}, "TrustedKeys"},
		"accounts without keys": {Security{AccountJWTs: map[string]string{"A": "x"}}, "AccountJWTs needs TrustedKeys"},
		"empty user name":       {Security{Users: map[string]string{" ": "b"}}, "empty user name"},
		"account key as nkey":   {Security{NKeys: []string{"AABC"}}, "NKeys[0]"},
		"user key as operator":  {Security{TrustedKeys: []string{"UABC"}}, "TrustedKeys[0]"},
		"TLS without a cert":    {Security{TLS: &tls.Config{}}, "no server certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Start(Config{StoreDir: t.TempDir(), Security: &tc.sec})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Config.Security") {
				t.Fatalf("Start = %v, want an error naming Config.Security and %q", err, tc.want)
			}
		})
	}
}
