package authz

import (
	"strings"
	"testing"
)

// TestAuthorize covers each verb × inheritance × subject kind, the quota
// boundary, the access-list rule, priority ceilings, not-found versus
// forbidden and the global permissions, on the standard fixture.
func TestAuthorize(t *testing.T) {
	a := mustNew(t, stdConfig(), stdTree())
	res := stdResolver()
	all := AllQueueFields

	cases := map[string]struct {
		subject Subject
		action  Action
		target  Target
		want    Code
		basis   string // optional: a substring of the Basis
	}{
		// view: subject kinds and inheritance
		"view: group entry on the tenant covers a project":  {user("bob").In("acme-admins").Obj(), ActQueueGet, queueT("acme/vision/train"), CodeOK, "view"},
		"view: user entry on the team covers a project":     {user("val").Obj(), ActQueueGet, queueT("acme/vision/train"), CodeOK, ""},
		"view: user entry on the team covers the team":      {user("val").Obj(), ActQueueGet, queueT("acme/vision"), CodeOK, ""},
		"view: entry on a project does not reach its team":  {user("trainer").Obj(), ActQueueGet, queueT("acme/vision"), CodeNotFound, ""},
		"view: entry on a team does not reach its tenant":   {user("val").Obj(), ActQueueGet, queueT("acme"), CodeNotFound, ""},
		"view: sibling team is hidden":                      {user("nina").In("nlp").Obj(), ActQueueGet, queueT("acme/vision"), CodeNotFound, ""},
		"view: other tenant is hidden":                      {user("bob").In("acme-admins").Obj(), ActQueueGet, queueT("globex"), CodeNotFound, ""},
		"view: token entry":                                 {token("tok1", "").Obj(), ActQueueGet, queueT("acme/vision"), CodeOK, ""},
		"view: workloads.view_all sees every queue":         {user("vic").In("viewers").Obj(), ActQueueGet, queueT("globex/x"), CodeOK, "view_all"},
		"view: malformed path matches no access list":       {user("bob").In("acme-admins").Obj(), ActQueueGet, queueT("acme//vision"), CodeNotFound, ""},
		"view: missing queue under own tenant inherits":     {user("bob").In("acme-admins").Obj(), ActQueueGet, queueT("acme/new"), CodeOK, ""},
		"view: names are case-sensitive":                    {user("bob").In("ACME-ADMINS").Obj(), ActQueueGet, queueT("acme"), CodeNotFound, ""},
		"view: workload in a visible queue":                 {user("val").Obj(), ActWorkloadGet, Target{Workload: "w-train", Queue: "acme/vision/train"}, CodeOK, ""},
		"explain: workload in a hidden queue is not found":  {user("nina").In("nlp").Obj(), ActWorkloadExplain, Target{Workload: "w-vision", Queue: "acme/vision"}, CodeNotFound, ""},
		"explain: workload in a visible queue":              {user("nina").In("nlp").Obj(), ActWorkloadExplain, Target{Workload: "w-nlp", Queue: "acme/nlp"}, CodeOK, ""},
		"view: unresolved workload is not found, even root": {user("root").Obj(), ActWorkloadGet, workloadT("w-missing"), CodeNotFound, ""},

		// submit
		"submit: group submit on the team":                  {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("acme/vision", 0, true), CodeOK, "submit on the queue"},
		"submit: group submit on the team covers a project": {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("acme/vision/train", 0, true), CodeOK, ""},
		"submit: token entry":                               {token("tok1", "").Obj(), ActWorkloadSubmit, submitT("acme/vision", 0, true), CodeOK, ""},
		"submit: view is not submit":                        {user("val").Obj(), ActWorkloadSubmit, submitT("acme/vision", 0, true), CodePermissionDenied, ""},
		"submit: cancel is not submit":                      {user("canceller").Obj(), ActWorkloadSubmit, submitT("acme/vision", 0, true), CodePermissionDenied, ""},
		"submit: update is not submit":                      {user("upd").Obj(), ActWorkloadSubmit, submitT("acme/vision", 0, true), CodePermissionDenied, ""},
		"submit: manage on the tenant is submit":            {user("bob").In("acme-admins").Obj(), ActWorkloadSubmit, submitT("acme/nlp", 0, true), CodeOK, ""},
		"submit: hidden queue is not found":                 {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("globex/x", 0, true), CodeNotFound, ""},
		"submit: missing queue of another tenant":           {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("globex/nope", 0, true), CodeNotFound, ""},
		"submit: missing queue below own team is allowed":   {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("acme/vision/nope", 0, true), CodeOK, ""},
		"submit: empty queue path":                          {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("", 0, true), CodeNotFound, ""},
		"submit: workloads.submit_any anywhere":             {user("cibot").In("ci").Obj(), ActWorkloadSubmit, submitT("globex/x", 0, true), CodeOK, "submit_any"},
		"submit: token's bound permission":                  {token("t9", "carl", PermWorkloadsSubmitAny).Obj(), ActWorkloadSubmit, submitT("globex/x", 0, true), CodeOK, ""},
		"submit: group mappings do not apply to a token":    {token("t9", "carl").In("platform").Obj(), ActWorkloadSubmit, submitT("globex/x", 0, true), CodeNotFound, ""},
		"submit: token acts for its user in access lists":   {token("t8", "val").Obj(), ActWorkloadGet, Target{Workload: "w-vision", Queue: "acme/vision"}, CodeOK, ""},

		// priority ceilings
		"ceiling: at the team's ceiling":                       {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("acme/vision", 100, true), CodeOK, ""},
		"ceiling: above the team's ceiling":                    {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("acme/vision", 101, true), CodePermissionDenied, "ceiling 100"},
		"ceiling: strictest along the path binds the project":  {user("trainer").Obj(), ActWorkloadSubmit, submitT("acme/vision/train", 101, true), CodePermissionDenied, "ceiling 100"},
		"ceiling: tenant's ceiling binds where none is set":    {user("nina").In("nlp").Obj(), ActWorkloadSubmit, submitT("acme/nlp", 1001, true), CodePermissionDenied, "ceiling 1000"},
		"ceiling: tenant's ceiling allows below it":            {user("nina").In("nlp").Obj(), ActWorkloadSubmit, submitT("acme/nlp", 1000, true), CodeOK, ""},
		"ceiling: tenant manager is exempt below its tenant":   {user("bob").In("acme-admins").Obj(), ActWorkloadSubmit, submitT("acme/vision", 500, true), CodeOK, ""},
		"ceiling: tenant manager is bound by its own tenant's": {user("bob").In("acme-admins").Obj(), ActWorkloadSubmit, submitT("acme/vision", 1001, true), CodePermissionDenied, "ceiling 1000"},
		"ceiling: project manager is bound by its team's":      {user("lena").In("vision-leads").Obj(), ActWorkloadSubmit, submitT("acme/vision/train", 101, true), CodePermissionDenied, "ceiling 100"},
		"ceiling: workloads.submit_any is not exempt":          {user("cibot").In("ci").Obj(), ActWorkloadSubmit, submitT("acme/vision", 101, true), CodePermissionDenied, "ceiling 100"},
		"ceiling: admin is exempt":                             {user("root").Obj(), ActWorkloadSubmit, submitT("acme/vision/train", 1_000_000, false), CodeOK, "admin"},
		"ceiling: non-preemptible refused where forbidden":     {user("trainer").Obj(), ActWorkloadSubmit, submitT("acme/vision/train", 0, false), CodePermissionDenied, "non-preemptible"},
		"ceiling: preemptible accepted where forbidden":        {user("trainer").Obj(), ActWorkloadSubmit, submitT("acme/vision/train", 0, true), CodeOK, ""},
		"ceiling: non-preemptible allowed where not forbidden": {user("alice").In("vision").Obj(), ActWorkloadSubmit, submitT("acme/vision", 0, false), CodeOK, ""},
		"ceiling: project manager is bound by its own policy":  {user("lena").In("vision-leads").Obj(), ActWorkloadSubmit, submitT("acme/vision/train", 0, false), CodePermissionDenied, ""},
		"ceiling: team's manager exempt from project's policy": {user("bob").In("acme-admins").Obj(), ActWorkloadSubmit, submitT("acme/vision/train", 0, false), CodeOK, ""},

		// cancel
		"cancel: cancel verb":                             {user("canceller").Obj(), ActWorkloadCancel, Target{Workload: "w-train", Queue: "acme/vision/train"}, CodeOK, "cancel on the queue"},
		"cancel: submitter cancels its own":               {user("alice").In("vision").Obj(), ActWorkloadCancel, Target{Workload: "w-vision", Queue: "acme/vision", Owner: "alice"}, CodeOK, "own workload"},
		"cancel: submit alone cannot cancel others' work": {user("alice").In("vision").Obj(), ActWorkloadCancel, Target{Workload: "w-train", Queue: "acme/vision/train", Owner: "trainer"}, CodePermissionDenied, ""},
		"cancel: view alone cannot cancel":                {user("val").Obj(), ActWorkloadCancel, Target{Workload: "w-vision", Queue: "acme/vision", Owner: "val"}, CodePermissionDenied, ""},
		"cancel: workloads.cancel_any":                    {user("jan").In("janitors").Obj(), ActWorkloadCancel, Target{Workload: "w-globex", Queue: "globex/x"}, CodeOK, "cancel_any"},
		"cancel: workloads.view_all cannot cancel":        {user("vic").In("viewers").Obj(), ActWorkloadCancel, Target{Workload: "w-globex", Queue: "globex/x"}, CodePermissionDenied, ""},
		"cancel: hidden workload is not found":            {user("canceller").Obj(), ActWorkloadCancel, Target{Workload: "w-globex", Queue: "globex/x"}, CodeNotFound, ""},
		"cancel: manage on the tenant cancels":            {user("bob").In("acme-admins").Obj(), ActWorkloadCancel, Target{Workload: "w-nlp", Queue: "acme/nlp"}, CodeOK, ""},

		// update: description, quota boundary, access list
		"update: update verb changes the description":                   {user("upd").Obj(), ActQueueUpdate, updateT("acme/vision", FieldDescription), CodeOK, ""},
		"update: update verb inherited by the project":                  {user("upd").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldDescription), CodeOK, ""},
		"update: submit verb cannot change the description":             {user("alice").In("vision").Obj(), ActQueueUpdate, updateT("acme/vision", FieldDescription), CodePermissionDenied, ""},
		"update: update verb cannot change the weight":                  {user("upd").Obj(), ActQueueUpdate, updateT("acme/vision", FieldWeight), CodePermissionDenied, "strictly above"},
		"quota: manage on own queue cannot raise its quota":             {user("lena").In("vision-leads").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldQuotas), CodePermissionDenied, "strictly above"},
		"quota: manage on own queue cannot change its weight":           {user("lena").In("vision-leads").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldWeight), CodePermissionDenied, ""},
		"quota: manage on own queue cannot change its ceiling":          {user("lena").In("vision-leads").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldCeiling), CodePermissionDenied, ""},
		"quota: tenant manager cannot raise the tenant's quota":         {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("acme", FieldQuotas), CodePermissionDenied, ""},
		"quota: tenant manager sets a team's quota":                     {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("acme/vision", FieldQuotas|FieldWeight), CodeOK, ""},
		"quota: tenant manager sets a project's weight":                 {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldWeight), CodeOK, ""},
		"quota: queues.create sets a tenant's quota":                    {user("olga").In("onboarding").Obj(), ActQueueUpdate, updateT("globex", FieldQuotas|FieldWeight|FieldCeiling), CodeOK, ""},
		"quota: queues.create cannot set a team's quota":                {user("olga").In("onboarding").Obj(), ActQueueUpdate, updateT("globex/x", FieldQuotas), CodeNotFound, ""},
		"access: manage on the queue changes its access list":           {user("lena").In("vision-leads").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldAccess), CodeOK, ""},
		"access: manage on an ancestor changes the access list":         {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldAccess), CodeOK, ""},
		"access: tenant manager changes the tenant's access list":       {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("acme", FieldAccess), CodeOK, ""},
		"access: update verb cannot change the access list":             {user("upd").Obj(), ActQueueUpdate, updateT("acme/vision", FieldAccess), CodePermissionDenied, "access list"},
		"access: queues.create cannot change a tenant's access list":    {user("olga").In("onboarding").Obj(), ActQueueUpdate, updateT("acme", FieldAccess), CodeNotFound, ""},
		"access: queues.create with view cannot change the access list": {user("olga").In("onboarding", "viewers").Obj(), ActQueueUpdate, updateT("acme", FieldAccess), CodePermissionDenied, "access list"},
		"update: no mask on a tenant needs more than its manager has":   {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("acme", all), CodePermissionDenied, ""},
		"update: no mask on a team is fine for the tenant manager":      {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("acme/vision", all), CodeOK, ""},
		"update: unknown field needs manage here and above":             {user("lena").In("vision-leads").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldUnknown), CodePermissionDenied, "unknown"},
		"update: unknown field allowed with manage above":               {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("acme/vision/train", FieldUnknown), CodeOK, ""},
		"update: hidden queue is not found":                             {user("bob").In("acme-admins").Obj(), ActQueueUpdate, updateT("globex/x", FieldDescription), CodeNotFound, ""},

		// create and delete
		"create: queues.create creates a tenant":                 {user("olga").In("onboarding").Obj(), ActQueueCreate, queueT("initech"), CodeOK, "queues.create"},
		"create: a tenant needs queues.create":                   {user("bob").In("acme-admins").Obj(), ActQueueCreate, queueT("initech"), CodePermissionDenied, ""},
		"create: manage on the parent creates a child":           {user("bob").In("acme-admins").Obj(), ActQueueCreate, queueT("acme/speech"), CodeOK, "manage on the parent"},
		"create: manage on the grandparent creates a grandchild": {user("bob").In("acme-admins").Obj(), ActQueueCreate, queueT("acme/vision/eval"), CodeOK, ""},
		"create: submit on the parent is not enough":             {user("alice").In("vision").Obj(), ActQueueCreate, queueT("acme/vision/eval"), CodePermissionDenied, ""},
		"create: queues.create alone cannot create a team":       {user("olga").In("onboarding").Obj(), ActQueueCreate, queueT("acme/speech"), CodeNotFound, ""},
		"create: under a hidden parent is not found":             {user("bob").In("acme-admins").Obj(), ActQueueCreate, queueT("globex/y"), CodeNotFound, ""},
		"delete: manage on the parent deletes a child":           {user("bob").In("acme-admins").Obj(), ActQueueDelete, queueT("acme/nlp"), CodeOK, ""},
		"delete: manage on the queue itself cannot delete it":    {user("lena").In("vision-leads").Obj(), ActQueueDelete, queueT("acme/vision/train"), CodePermissionDenied, ""},
		"delete: tenant manager alone cannot delete the tenant":  {user("bob").In("acme-admins").Obj(), ActQueueDelete, queueT("acme"), CodePermissionDenied, ""},
		"delete: queues.create alone cannot delete a tenant":     {user("olga").In("onboarding").Obj(), ActQueueDelete, queueT("acme"), CodeNotFound, ""},
		"delete: queues.create and manage delete a tenant":       {user("onboarder").In("onboarding").Obj(), ActQueueDelete, queueT("acme"), CodeOK, "queues.create and manage"},
		"delete: admin deletes anything":                         {user("root").Obj(), ActQueueDelete, queueT("globex"), CodeOK, ""},

		// global permissions
		"cluster: clusters.manage drains":        {user("opal").In("ops").Obj(), ActClusterDrain, Target{Cluster: "gpu-east"}, CodeOK, ""},
		"cluster: a tenant manager cannot drain": {user("bob").In("acme-admins").Obj(), ActClusterResume, Target{Cluster: "gpu-east"}, CodePermissionDenied, "clusters.manage"},
		"cluster: any user may list clusters":    {user("nobody").Obj(), ActClusterList, Target{}, CodeOK, ""},
		"audit: audit.read lists audit events":   {user("aud").In("auditors").Obj(), ActAuditList, Target{}, CodeOK, ""},
		"audit: view_all does not read audit":    {user("vic").In("viewers").Obj(), ActAuditList, Target{}, CodePermissionDenied, ""},
		"admin: everything":                      {user("pat").In("platform").Obj(), ActAuditList, Target{}, CodeOK, ""},
		"reflection: needs authentication only":  {user("nobody").Obj(), ActReflection, Target{}, CodeOK, ""},

		// tokens
		"token: mint a subset of own permissions":    {user("mia").In("minters").Obj(), ActTokenCreate, Target{Permissions: []string{"workloads.view_all"}}, CodeOK, ""},
		"token: mint with no permissions":            {user("mia").In("minters").Obj(), ActTokenCreate, Target{}, CodeOK, ""},
		"token: cannot mint a permission not held":   {user("mia").In("minters").Obj(), ActTokenCreate, Target{Permissions: []string{"audit.read"}}, CodePermissionDenied, "not held"},
		"token: cannot mint admin without admin":     {user("mia").In("minters").Obj(), ActTokenCreate, Target{Permissions: []string{"admin"}}, CodePermissionDenied, ""},
		"token: unknown permission":                  {user("mia").In("minters").Obj(), ActTokenCreate, Target{Permissions: []string{"queue.create"}}, CodePermissionDenied, ""},
		"token: minting needs tokens.create":         {user("vic").In("viewers").Obj(), ActTokenCreate, Target{}, CodePermissionDenied, "tokens.create"},
		"token: admin mints admin":                   {user("root").Obj(), ActTokenCreate, Target{Permissions: []string{"admin"}}, CodeOK, ""},
		"token: a token mints within its own":        {token("t1", "mia", PermTokensCreate, PermAuditRead).Obj(), ActTokenCreate, Target{Permissions: []string{"audit.read"}}, CodeOK, ""},
		"token: a token cannot mint beyond its own":  {token("t1", "mia", PermTokensCreate).In("minters").Obj(), ActTokenCreate, Target{Permissions: []string{"workloads.view_all"}}, CodePermissionDenied, ""},
		"token: mint acting as oneself in own group": {user("mia").In("minters", "vision").Obj(), ActTokenCreate, Target{Owner: "mia", Groups: []string{"vision"}}, CodeOK, ""},
		"token: mint acting as another user":         {user("mia").In("minters").Obj(), ActTokenCreate, Target{Owner: "alice"}, CodePermissionDenied, "token user"},
		"token: mint in a group one is not in":       {user("mia").In("minters").Obj(), ActTokenCreate, Target{Groups: []string{"acme-admins"}}, CodePermissionDenied, ""},
		"token: revoke own":                          {user("alice").Obj(), ActTokenRevoke, Target{Token: "tok-alice", Owner: "alice"}, CodeOK, ""},
		"token: revoke another's is not found":       {user("alice").In("minters").Obj(), ActTokenRevoke, Target{Token: "tok-bob", Owner: "bob"}, CodeNotFound, ""},
		"token: revoke a missing token is not found": {user("alice").Obj(), ActTokenRevoke, Target{Token: "nope"}, CodeNotFound, ""},
		"token: admin revokes any":                   {user("root").Obj(), ActTokenRevoke, Target{Token: "tok-bob", Owner: "bob"}, CodeOK, ""},

		// anonymous
		"anonymous: health":         {anonymous().Obj(), ActHealthCheck, Target{}, CodeOK, ""},
		"anonymous: submit":         {anonymous().Obj(), ActWorkloadSubmit, submitT("acme/vision", 0, true), CodeUnauthenticated, ""},
		"anonymous: list clusters":  {anonymous().Obj(), ActClusterList, Target{}, CodeUnauthenticated, ""},
		"anonymous: reflection":     {anonymous().Obj(), ActReflection, Target{}, CodeUnauthenticated, ""},
		"anonymous: groups alone":   {Subject{Groups: []string{"platform"}}, ActQueueGet, queueT("acme"), CodeUnauthenticated, ""},
		"unknown action is refused": {user("root").Obj(), Action("queues.explode"), Target{}, CodePermissionDenied, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := a.Bind(tc.subject)
			d := p.authorize(tc.action, tc.target, res.resolvers())
			if d.Code != tc.want || d.Allowed != (tc.want == CodeOK) {
				t.Fatalf("got %s (allowed=%v), want %s\nreason: %s\ndetail: %s", d.Code, d.Allowed, tc.want, d.Reason, d.Detail())
			}
			if tc.basis != "" && !strings.Contains(d.Basis, tc.basis) {
				t.Errorf("basis %q does not mention %q", d.Basis, tc.basis)
			}
			if d.Action != tc.action {
				t.Errorf("action %q, want %q", d.Action, tc.action)
			}
			if !d.Allowed && d.Reason == "" {
				t.Errorf("a refusal without a reason")
			}
			checkSafeReason(t, p, tc.target, d)
		})
	}
}

// checkSafeReason: a refusal never names a queue the caller may not see,
// except the path the caller itself sent.
func checkSafeReason(t *testing.T, p *Principal, sent Target, d Decision) {
	t.Helper()
	if d.Allowed || sent.Queue == "" {
		return
	}
	if sent.Workload != "" && !p.CanView(sent.Queue) && strings.Contains(d.Reason, sent.Queue) {
		t.Errorf("reason %q names the hidden queue %q of a workload", d.Reason, sent.Queue)
	}
	for _, q := range []string{"globex", "acme", "acme/vision", "acme/nlp"} {
		if !p.CanView(q) && !strings.HasPrefix(sent.Queue, q) && strings.Contains(d.Reason, q) {
			t.Errorf("reason %q names the hidden queue %q", d.Reason, q)
		}
	}
}

// TestNotFoundEqualsForbiddenForHiddenWorkloads: a caller who may not view
// a workload's queue gets exactly the answer a missing workload gets.
func TestNotFoundEqualsForbiddenForHiddenWorkloads(t *testing.T) {
	a := mustNew(t, stdConfig(), stdTree())
	r := stdResolver().resolvers()
	p := a.Bind(user("nina").In("nlp").Obj())
	for _, m := range []string{workloadSvc + "GetWorkload", workloadSvc + "CancelWorkload", workloadSvc + "ExplainWorkload"} {
		hidden := p.AuthorizeMethod(m, reqFor(t, m, "w-globex"), r)
		missing := p.AuthorizeMethod(m, reqFor(t, m, "w-globex-missing"), r)
		if hidden.Code != CodeNotFound || missing.Code != CodeNotFound {
			t.Fatalf("%s: hidden %s, missing %s; want NotFound for both", m, hidden.Code, missing.Code)
		}
		if hidden.Reason != WorkloadNotFound("w-globex") || missing.Reason != WorkloadNotFound("w-globex-missing") {
			t.Errorf("%s: reasons differ in form: %q vs %q", m, hidden.Reason, missing.Reason)
		}
		if strings.Contains(hidden.Reason, "globex/x") {
			t.Errorf("%s: reason names the hidden queue: %q", m, hidden.Reason)
		}
		if !strings.Contains(hidden.Detail(), "globex/x") {
			t.Errorf("%s: the audit detail should name the resolved queue: %q", m, hidden.Detail())
		}
	}
	// A hidden queue and a missing one read alike too.
	hq := p.Authorize(ActQueueGet, queueT("globex"))
	mq := p.Authorize(ActQueueGet, queueT("nosuch"))
	if hq.Code != mq.Code || hq.Reason != QueueNotFound("globex") || mq.Reason != QueueNotFound("nosuch") {
		t.Errorf("hidden %v %q, missing %v %q", hq.Code, hq.Reason, mq.Code, mq.Reason)
	}
}

// TestAuthorizeAllChecksEveryTarget: a batch is refused as a whole when
// any one target is refused, wherever it is in the batch (Armada checked
// only the first job's queue).
func TestAuthorizeAllChecksEveryTarget(t *testing.T) {
	a := mustNew(t, stdConfig(), stdTree())
	r := stdResolver().resolvers()
	p := a.Bind(user("canceller").Obj())
	cases := map[string]struct {
		ids  []string
		want Code
		pos  string
	}{
		"all in a visible queue":       {[]string{"w-vision", "w-train"}, CodeOK, ""},
		"last one hidden":              {[]string{"w-vision", "w-train", "w-globex"}, CodeNotFound, "target 3 of 3"},
		"first one hidden":             {[]string{"w-globex", "w-vision"}, CodeNotFound, "target 1 of 2"},
		"one missing":                  {[]string{"w-vision", "w-missing"}, CodeNotFound, "target 2 of 2"},
		"one in a deleted queue below": {[]string{"w-vision", "w-orphan"}, CodeOK, ""},
		"empty batch":                  {nil, CodeOK, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			targets := make([]Target, len(tc.ids))
			for i, id := range tc.ids {
				targets[i] = workloadT(id)
			}
			d := p.AuthorizeAll(ActWorkloadCancel, targets, r)
			if d.Code != tc.want {
				t.Fatalf("got %s, want %s (%s)", d.Code, tc.want, d.Detail())
			}
			if !strings.Contains(d.Basis, tc.pos) {
				t.Errorf("basis %q does not say %q", d.Basis, tc.pos)
			}
		})
	}
	if d := a.Bind(anonymous().Obj()).AuthorizeAll(ActWorkloadCancel, nil, r); d.Code != CodeUnauthenticated {
		t.Errorf("anonymous empty batch: %s", d.Code)
	}
}

// TestViewFilter: the per-item filter and the prefixes for range scans.
func TestViewFilter(t *testing.T) {
	a := mustNew(t, stdConfig(), stdTree())
	paths := []string{"acme", "acme/vision", "acme/vision/train", "acme/nlp", "globex", "globex/x", "acme/vision/gone"}
	cases := map[string]struct {
		s        Subject
		all      bool
		visible  []string
		prefixes []string
	}{
		"tenant manager":   {user("bob").In("acme-admins").Obj(), false, []string{"acme", "acme/vision", "acme/vision/train", "acme/nlp", "acme/vision/gone"}, []string{"acme"}},
		"team viewer":      {user("val").Obj(), false, []string{"acme/vision", "acme/vision/train", "acme/vision/gone"}, []string{"acme/vision"}},
		"two subtrees":     {user("trainer").In("nlp").Obj(), false, []string{"acme/vision/train", "acme/nlp"}, []string{"acme/nlp", "acme/vision/train"}},
		"nested grants":    {user("lena").In("vision-leads", "vision").Obj(), false, []string{"acme/vision", "acme/vision/train", "acme/vision/gone"}, []string{"acme/vision"}},
		"view_all":         {user("vic").In("viewers").Obj(), true, paths, nil},
		"nobody":           {user("nobody").Obj(), false, nil, nil},
		"anonymous":        {anonymous().Obj(), false, nil, nil},
		"token for a user": {token("t", "val").Obj(), false, []string{"acme/vision", "acme/vision/train", "acme/vision/gone"}, []string{"acme/vision"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := a.Bind(tc.s)
			f := p.Filter()
			if f.All() != tc.all {
				t.Errorf("All() = %v", f.All())
			}
			want := map[string]bool{}
			for _, v := range tc.visible {
				want[v] = true
			}
			for _, q := range paths {
				if f.Visible(q) != want[q] || p.CanView(q) != want[q] {
					t.Errorf("%s: Visible=%v CanView=%v, want %v", q, f.Visible(q), p.CanView(q), want[q])
				}
			}
			if got := f.Prefixes(); strings.Join(got, ",") != strings.Join(tc.prefixes, ",") {
				t.Errorf("Prefixes() = %v, want %v", got, tc.prefixes)
			}
		})
	}
}

// TestWithQueuesLeavesTheOldSnapshot: a new snapshot changes nothing in
// the old one, and principals stay bound to the snapshot they came from.
func TestWithQueuesLeavesTheOldSnapshot(t *testing.T) {
	a := mustNew(t, stdConfig(), stdTree())
	b, err := a.WithQueues(makeTree().Queue("globex", "user:val=view").Obj())
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := a.Bind(user("val").Obj()), b.Bind(user("val").Obj())
	if !pa.CanView("acme/vision") || pa.CanView("globex") {
		t.Error("old snapshot changed")
	}
	if pb.CanView("acme/vision") || !pb.CanView("globex") {
		t.Error("new snapshot wrong")
	}
	if !b.Bind(user("root").Obj()).Has(PermAdmin) {
		t.Error("config lost in WithQueues")
	}
	if _, err := a.WithQueues(Queues{"Bad": {}}); !IsInvalid(err) {
		t.Errorf("invalid snapshot accepted: %v", err)
	}
}
