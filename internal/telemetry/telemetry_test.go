package telemetry

import (
	"context"
	"strings"
	"testing"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		on      bool
		problem string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, problem: "otlp only"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, problem: "http/protobuf or grpc"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
	} {
		on, err := Enabled(func(k string) string { return c.env[k] })
		if on != c.on || (err == nil) != (c.problem == "") || (err != nil && !strings.Contains(err.Error(), c.problem)) {
			t.Errorf("%v: on %v, err %v; want on %v, problem %q", c.env, on, err, c.on, c.problem)
		}
	}
}

func TestOffByDefault(t *testing.T) {
	tr, err := FromEnv(context.Background(), func(string) string { return "" }, "v1")
	if err != nil || tr.Provider() != nil {
		t.Fatalf("FromEnv with no OTEL_* variables: provider %v, err %v; want none", tr.Provider(), err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestServiceNameFromEnvWins(t *testing.T) {
	res, err := newResource(context.Background(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Set().Value(semconv.ServiceNameKey); v.AsString() != "outbox-relay" {
		t.Errorf("service.name %q; want outbox-relay", v.AsString())
	}
	t.Setenv("OTEL_SERVICE_NAME", "relay-eu")
	if res, err = newResource(context.Background(), "v1"); err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Set().Value(semconv.ServiceNameKey); v.AsString() != "relay-eu" {
		t.Errorf("service.name %q with OTEL_SERVICE_NAME=relay-eu", v.AsString())
	}
}
