package config

import (
	"strings"
	"testing"
)

func TestClassWeights(t *testing.T) {
	s := NewSchema(Options{})
	c, err := s.Parse("hub.yaml", hubFile("scheduling:\n  classWeights: {nvidia-h100-80gb: 4, nvidia-t4-16gb: 0.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Scheduling.ClassWeights; w["nvidia-h100-80gb"] != 4 || w["nvidia-t4-16gb"] != 0.5 {
		t.Fatalf("class weights %v", w)
	}
	for _, bad := range []string{"{h100: 0}", "{h100: -2}", "{\"Bad Class\": 1}"} {
		_, err := s.Parse("hub.yaml", hubFile("scheduling:\n  classWeights: "+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), "scheduling.classWeights.") {
			t.Errorf("classWeights %s: err = %v, want one naming scheduling.classWeights.<class>", bad, err)
		}
	}
}
