package authz

import (
	"errors"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	cases := map[string]struct {
		cfg  *Config
		want []string // one line per FieldError, in order; nil means valid
	}{
		"valid":      {stdConfig(), nil},
		"nil":        {nil, nil},
		"empty maps": {&Config{}, nil},
		"near miss suggests the permission": {
			&Config{GroupPermissions: map[string][]string{"ml-admins": {"admin", "audit.read", "queue.create"}}},
			[]string{`authorization.groupPermissions["ml-admins"][2]: unknown permission "queue.create"; did you mean "queues.create"?`},
		},
		"far miss lists the permissions": {
			&Config{UserPermissions: map[string][]string{"carl": {"superuser"}}},
			[]string{`authorization.userPermissions["carl"][0]: unknown permission "superuser"; known: admin, queues.create, clusters.manage, workloads.submit_any, workloads.cancel_any, workloads.view_all, audit.read, tokens.create`},
		},
		"upper case is a near miss": {
			&Config{UserPermissions: map[string][]string{"carl": {"ADMIN"}}},
			[]string{`authorization.userPermissions["carl"][0]: unknown permission "ADMIN"; did you mean "admin"?`},
		},
		"duplicate permission": {
			&Config{GroupPermissions: map[string][]string{"g": {"admin", "audit.read", "admin"}}},
			[]string{`authorization.groupPermissions["g"][2]: duplicate permission "admin" (also at [0])`},
		},
		"bad names, sorted by field": {
			&Config{GroupPermissions: map[string][]string{"": {"admin"}, "two words": {"admin"}}, UserPermissions: map[string][]string{"ok": {"nope.nope"}}},
			[]string{
				`authorization.groupPermissions[""]: group name must not be empty`,
				`authorization.groupPermissions["two words"]: group name must not contain spaces or control characters`,
				`authorization.userPermissions["ok"][0]: unknown permission "nope.nope"; known: admin, queues.create, clusters.manage, workloads.submit_any, workloads.cancel_any, workloads.view_all, audit.read, tokens.create`,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
			if !IsInvalid(err) {
				t.Error("IsInvalid is false")
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, ConfigFieldPrefix+".") {
				t.Errorf("no FieldError with the config prefix: %v", err)
			}
			if _, err := New(tc.cfg, nil); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

func TestQueuesValidate(t *testing.T) {
	big := MaxPriority + 1
	cases := map[string]struct {
		q    Queues
		want []string
	}{
		"valid": {stdTree(), nil},
		"bad path, subject, verb, duplicate and ceiling": {
			Queues{
				"Acme":    {},
				"a/b/c/d": {},
				"acme": {
					Access: []Entry{
						{Subject: "grp:x", Verbs: []Verb{"view"}},
						{Subject: "user:bob", Verbs: []Verb{"veiw", "manage"}},
						{Subject: "user:bob", Verbs: []Verb{"submit"}},
						{Subject: "token:", Verbs: nil},
					},
					MaxPriority: &big,
				},
			},
			[]string{
				`queues["Acme"]: invalid queue path "Acme": 1 to 3 segments separated by '/', each a DNS-1123 label`,
				`queues["a/b/c/d"]: invalid queue path "a/b/c/d": 1 to 3 segments separated by '/', each a DNS-1123 label`,
				`queues["acme"].access[0].subject: subject "grp:x" has unknown kind "grp"; did you mean "group"?`,
				`queues["acme"].access[1].verbs[0]: unknown verb "veiw"; did you mean "view"?`,
				`queues["acme"].access[2].subject: subject "user:bob" is listed twice (also at access[1]); merge the verbs into one entry`,
				`queues["acme"].access[3].subject: subject "token:": name must not be empty`,
				`queues["acme"].access[3].verbs: must name at least one verb (view, submit, cancel, update, manage)`,
				`queues["acme"].maxPriority: must be between -1000000 and 1000000 (got 1000001)`,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.q.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != strings.Join(tc.want, "\n") {
				t.Errorf("got:\n%v\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
		})
	}
	// A policy validated on its own names the caller's field.
	err := QueuePolicy{Access: []Entry{{Subject: "role:x", Verbs: []Verb{"view"}}}}.Validate("queue")
	if err == nil || !strings.HasPrefix(err.Error(), "queue.access[0].subject: ") {
		t.Errorf("got %v", err)
	}
}

func TestValidQueuePath(t *testing.T) {
	good := []string{"a", "acme", "acme/vision", "acme/vision/train", "a-b/c-d/e0", strings.Repeat("a", 63)}
	bad := []string{"", "/", "acme/", "/acme", "acme//x", "a/b/c/d", "Acme", "-a", "a-", "a-/b", "a/-b", "a_b", "a.b", "a b", strings.Repeat("a", 64), "a/" + strings.Repeat("b", 64)}
	for _, p := range good {
		if !validQueuePath(p) {
			t.Errorf("%q should be valid", p)
		}
	}
	for _, p := range bad {
		if validQueuePath(p) {
			t.Errorf("%q should be invalid", p)
		}
	}
}
