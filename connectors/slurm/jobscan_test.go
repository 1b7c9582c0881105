package slurm

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// sameAsFull checks that DecodeJobs (with the reduction) and the plain
// encoding/json decode agree on data: both fail, or both give equal jobs
// and errors.
func sameAsFull(t *testing.T, data []byte) {
	t.Helper()
	a := v0038{}
	jobs, errs, err := a.DecodeJobs(data)
	wjobs, werrs, werr := a.decodeJobsNoReduce(data)
	if (err == nil) != (werr == nil) {
		t.Fatalf("input %.300q: reduced decode err %v, full decode err %v", data, err, werr)
	}
	if !reflect.DeepEqual(jobs, wjobs) || !reflect.DeepEqual(errs, werrs) {
		t.Fatalf("input %.300q: reduced decode %+v %+v, full %+v %+v", data, jobs, errs, wjobs, werrs)
	}
	if r := reduceJobs(data); r != nil && !json.Valid(r) {
		t.Fatalf("reduced %.300q is not valid JSON", r)
	}
	if r := reduceJobs(data); r != nil && !json.Valid(data) {
		t.Fatalf("input %.300q is not valid JSON, yet it was reduced", data)
	}
}

func TestReduceJobsDecodesTheSame(t *testing.T) {
	for _, f := range []string{"v0038_jobs_running.json", "v0038_jobs_finished.json"} {
		data := readFixture(t, f)
		sameAsFull(t, data)
		r := reduceJobs(data)
		if r == nil {
			t.Fatalf("%s: not reduced", f)
		}
		if len(r)*2 > len(data) {
			t.Errorf("%s: reduced to %d of %d bytes; the unread fields should be gone", f, len(r), len(data))
		}
	}
	for _, s := range []string{
		`{"jobs":[{"job_id":5,"comment":"meridian:v1 dispatch=a workload=b","job_state":"RUNNING","big":{"a":[1,2,{"b":null}]},"x":"\u00e9\"\\"}]}`,
		`{"JOBS":[{"JOB_ID":5,"Job_State":"pending"}],"Meta":{"plugin":{"type":"openapi/v0.0.38"}}}`,
		`{"jobs":[{"job_id":5,"job_ſtate":"RUNNING"}]}`,      // Unicode folding: ſ is an s to encoding/json
		`{"jobs":[{"job_id":5,"job\u005fstate":"RUNNING"}]}`, // an escaped key
		`{"jobs":[{"job_id":5},{"job_id":6}],"jobs":[{"job_id":7}]}`,
		`{"jobs":null}`, `{}`, `null`, `[]`, `{"jobs":[]}`, `{"jobs":[null]}`, `{"jobs":[1]}`, `{"jobs":{}}`,
		`{"jobs":[{"job_id":"x"}]}`, `{"jobs":[{"job_id":5,"exit_code":1.5}]}`,
		`{"jobs":[{"job_id":5,"other":01}]}`, `{"jobs":[{"job_id":5,"other":1.}]}`, `{"jobs":[{"job_id":5,"other":-}]}`,
		`{"jobs":[{"job_id":5,"other":"a` + "\x01" + `"}]}`, `{"jobs":[{"job_id":5,"other":"\q"}]}`, `{"jobs":[{"job_id":5,"other":"\u12"}]}`,
		`{"jobs":[{"job_id":5,"other":tru}]}`, `{"jobs":[{"job_id":5,"other":[1,]}]}`, `{"jobs":[{"job_id":5}]} x`,
		`{"jobs":[{"job_id":5,"other":1e5,"o2":-0.5E-3,"o3":true,"o4":false}]}`, ` {"jobs" : [ { "job_id" : 5 } ] } `,
		`{"errors":[{"error_code":2017,"error":"Invalid job id"}],"jobs":[]}`,
		`{"jobs":[{"job_id":5,"deep":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}]}`,
		`{"jobs":[{"job_id":5,"deep":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}]}`,
		"{\"jobs\":[{\"job_id\":5,\"name\":\"\xff\xfe\"}]}",
	} {
		sameAsFull(t, []byte(s))
	}
}

// FuzzReduceJobs: for any input, DecodeJobs with the reduction and the full
// encoding/json decode agree, and only valid JSON is ever reduced.
func FuzzReduceJobs(f *testing.F) {
	f.Add(readFixture(f, "v0038_jobs_running.json"))
	f.Add([]byte(`{"jobs":[{"job_id":5,"job_ſtate":"RUNNING","x":[{"y":"\u00e9"}]}],"meta":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) { sameAsFull(t, data) })
}

// BenchmarkDecodeJobs decodes a listing of 400 running and finished jobs
// (the fixtures repeated), with and without the reduction.
func BenchmarkDecodeJobs(b *testing.B) {
	var docs [][]byte
	for _, f := range []string{"v0038_jobs_running.json", "v0038_jobs_finished.json"} {
		var r struct {
			Jobs []json.RawMessage `json:"jobs"`
		}
		if err := json.Unmarshal(readFixture(b, f), &r); err != nil {
			b.Fatal(err)
		}
		for _, j := range r.Jobs {
			docs = append(docs, j)
		}
	}
	var buf bytes.Buffer
	buf.WriteString(`{"meta":{"plugin":{"type":"openapi/v0.0.38"}},"errors":[],"jobs":[`)
	for i := range 400 {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(docs[i%len(docs)])
	}
	buf.WriteString("]}")
	data := buf.Bytes()
	for name, dec := range map[string]func([]byte) ([]JobInfo, []SlurmError, error){
		"reduced": v0038{}.DecodeJobs, "full": v0038{}.decodeJobsNoReduce,
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if jobs, _, err := dec(data); err != nil || len(jobs) != 400 {
					b.Fatalf("%d jobs, %v", len(jobs), err)
				}
			}
		})
	}
}
