package main

import (
	"io"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/hub/server"
)

func clearEtcdEnv(t *testing.T) {
	for _, k := range []string{"MERIDIAN_ETCD_ENDPOINTS", "MERIDIAN_ETCD_CA_FILE", "MERIDIAN_ETCD_CERT_FILE", "MERIDIAN_ETCD_KEY_FILE",
		"MERIDIAN_ETCD_USERNAME", "MERIDIAN_ETCD_PASSWORD", "MERIDIAN_ETCD_PASSWORD_FILE"} {
		t.Setenv(k, "")
	}
}

// TestEtcdTLSFlagsReachTheServer: the etcd TLS and user flags, and the
// password from the environment, end up in server.Config.EtcdClient.
func TestEtcdTLSFlagsReachTheServer(t *testing.T) {
	clearEtcdEnv(t)
	t.Setenv("MERIDIAN_ETCD_PASSWORD", "s3cret")
	o, err := parseFlags([]string{"--etcd-endpoints", "https://10.0.0.5:2379,https://10.0.0.6:2379",
		"--etcd-ca-file", "/etc/meridian/etcd/ca.crt", "--etcd-cert-file", "/etc/meridian/etcd/tls.crt", "--etcd-key-file", "/etc/meridian/etcd/tls.key",
		"--etcd-username", "meridian"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := server.EtcdClient{CAFile: "/etc/meridian/etcd/ca.crt", CertFile: "/etc/meridian/etcd/tls.crt", KeyFile: "/etc/meridian/etcd/tls.key",
		Username: "meridian", Password: "s3cret"}
	if o.cfg.EtcdClient != want {
		t.Fatalf("EtcdClient = %+v, want %+v", o.cfg.EtcdClient, want)
	}
	if len(o.cfg.EtcdEndpoints) != 2 {
		t.Fatalf("endpoints %v", o.cfg.EtcdEndpoints)
	}
}

// TestEtcdAuthFlagErrors: settings that cannot work stop meridian-hub
// before it starts, naming the flag; there is no flag for the password.
func TestEtcdAuthFlagErrors(t *testing.T) {
	ext := []string{"--etcd-endpoints", "https://10.0.0.5:2379"}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want []string
	}{
		"TLS without endpoints":     {[]string{"--etcd-ca-file", "ca.crt"}, nil, []string{"need --etcd-endpoints"}},
		"user env without endpoint": {nil, map[string]string{"MERIDIAN_ETCD_USERNAME": "meridian", "MERIDIAN_ETCD_PASSWORD": "x"}, []string{"need --etcd-endpoints"}},
		"cert without key":          {append(ext, "--etcd-cert-file", "tls.crt"), nil, []string{"etcd.tls.keyFile", "--etcd-key-file"}},
		"key without cert":          {append(ext, "--etcd-key-file", "tls.key"), nil, []string{"etcd.tls.certFile", "--etcd-cert-file"}},
		"http endpoint with TLS":    {[]string{"--etcd-endpoints", "http://10.0.0.5:2379", "--etcd-ca-file", "ca.crt"}, nil, []string{"etcd.endpoints[0]", "https://"}},
		"password without user":     {append(ext, "--etcd-password-file", "pw"), nil, []string{"needs --etcd-username"}},
		"env password without user": {ext, map[string]string{"MERIDIAN_ETCD_PASSWORD": "x"}, []string{"needs --etcd-username"}},
		"user without password":     {append(ext, "--etcd-username", "meridian"), nil, []string{"--etcd-password-file or env MERIDIAN_ETCD_PASSWORD"}},
		"password twice":            {append(ext, "--etcd-username", "meridian", "--etcd-password-file", "pw"), map[string]string{"MERIDIAN_ETCD_PASSWORD": "x"}, []string{"not both"}},
		"password as a flag":        {append(ext, "--etcd-password", "x"), nil, []string{"unknown flag: --etcd-password"}},
	} {
		t.Run(name, func(t *testing.T) {
			clearEtcdEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := parseFlags(tc.args, io.Discard)
			if err == nil {
				t.Fatal("accepted, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q\nwant it to say %q", err, w)
				}
			}
		})
	}
}
