package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"go.yaml.in/yaml/v3"
)

// The shapes of the Kubernetes objects in deploy/kubernetes, as far as the
// manifests use them. Decoding is strict (unknown fields fail), so a
// misspelt field such as readinesProbe is caught without pulling in the
// Kubernetes client modules. Fields the test does not look at are any.
type (
	k8sMeta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	k8sHeader struct {
		APIVersion string  `yaml:"apiVersion"`
		Kind       string  `yaml:"kind"`
		Metadata   k8sMeta `yaml:"metadata"`
	}
	k8sSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	k8sProbe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		TimeoutSeconds   int `yaml:"timeoutSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
	k8sContainer struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
			Protocol      string `yaml:"protocol"`
		} `yaml:"ports"`
		LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
		ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext any `yaml:"securityContext"`
		VolumeMounts    []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	k8sPodTemplate struct {
		Metadata k8sMeta `yaml:"metadata"`
		Spec     struct {
			RestartPolicy                 string `yaml:"restartPolicy"`
			AutomountServiceAccountToken  *bool  `yaml:"automountServiceAccountToken"`
			TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
			SecurityContext               struct {
				RunAsNonRoot   bool `yaml:"runAsNonRoot"`
				RunAsUser      int  `yaml:"runAsUser"`
				RunAsGroup     int  `yaml:"runAsGroup"`
				FSGroup        int  `yaml:"fsGroup"`
				SeccompProfile any  `yaml:"seccompProfile"`
			} `yaml:"securityContext"`
			TopologySpreadConstraints any            `yaml:"topologySpreadConstraints"`
			Containers                []k8sContainer `yaml:"containers"`
			Volumes                   []struct {
				Name   string `yaml:"name"`
				Secret *struct {
					SecretName  string `yaml:"secretName"`
					DefaultMode int    `yaml:"defaultMode"`
				} `yaml:"secret"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	}
	k8sDeployment struct {
		k8sHeader `yaml:",inline"`
		Spec      struct {
			Replicas             int         `yaml:"replicas"`
			RevisionHistoryLimit int         `yaml:"revisionHistoryLimit"`
			Selector             k8sSelector `yaml:"selector"`
			Strategy             struct {
				Type          string `yaml:"type"`
				RollingUpdate struct {
					MaxSurge       any `yaml:"maxSurge"`
					MaxUnavailable any `yaml:"maxUnavailable"`
				} `yaml:"rollingUpdate"`
			} `yaml:"strategy"`
			Template k8sPodTemplate `yaml:"template"`
		} `yaml:"spec"`
	}
	k8sJob struct {
		k8sHeader `yaml:",inline"`
		Spec      struct {
			BackoffLimit int            `yaml:"backoffLimit"`
			Template     k8sPodTemplate `yaml:"template"`
		} `yaml:"spec"`
	}
	k8sPDB struct {
		k8sHeader `yaml:",inline"`
		Spec      struct {
			MinAvailable   any         `yaml:"minAvailable"`
			MaxUnavailable any         `yaml:"maxUnavailable"`
			Selector       k8sSelector `yaml:"selector"`
		} `yaml:"spec"`
	}
	k8sSecret struct {
		k8sHeader  `yaml:",inline"`
		Type       string            `yaml:"type"`
		StringData map[string]string `yaml:"stringData"`
	}
	k8sService struct {
		k8sHeader `yaml:",inline"`
		Spec      struct {
			ClusterIP                string            `yaml:"clusterIP"`
			PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
			Selector                 map[string]string `yaml:"selector"`
			Ports                    []struct {
				Name       string `yaml:"name"`
				Port       int    `yaml:"port"`
				TargetPort any    `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	k8sKustomization struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Resources  []string `yaml:"resources"`
	}
)

// k8sObjects holds the decoded manifests by kind and name.
type k8sObjects struct {
	deployments map[string]k8sDeployment
	jobs        map[string]k8sJob
	pdbs        map[string]k8sPDB
	secrets     map[string]k8sSecret
	services    map[string]k8sService
	files       []string
}

const k8sDir = "../../deploy/kubernetes"

// loadK8s decodes every document of every manifest strictly into the
// shape of its kind.
func loadK8s(t *testing.T) *k8sObjects {
	t.Helper()
	objs := &k8sObjects{deployments: map[string]k8sDeployment{}, jobs: map[string]k8sJob{}, pdbs: map[string]k8sPDB{},
		secrets: map[string]k8sSecret{}, services: map[string]k8sService{}}
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", k8sDir, err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(file)
		if base == "kustomization.yaml" {
			var k k8sKustomization
			strictYAML(t, base, raw, &k)
			objs.files = k.Resources
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for i := 0; ; i++ {
			var node yaml.Node
			if err := dec.Decode(&node); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s document %d: %v", base, i, err)
			}
			doc, err := yaml.Marshal(&node)
			if err != nil {
				t.Fatal(err)
			}
			var h struct {
				Kind     string  `yaml:"kind"`
				Metadata k8sMeta `yaml:"metadata"`
			}
			if err := node.Decode(&h); err != nil || h.Kind == "" || h.Metadata.Name == "" {
				t.Fatalf("%s document %d: no kind or metadata.name (%v)", base, i, err)
			}
			where := base + " " + h.Kind + "/" + h.Metadata.Name
			switch h.Kind {
			case "Deployment":
				objs.deployments[h.Metadata.Name] = strictDecode[k8sDeployment](t, where, doc)
			case "Job":
				objs.jobs[h.Metadata.Name] = strictDecode[k8sJob](t, where, doc)
			case "PodDisruptionBudget":
				objs.pdbs[h.Metadata.Name] = strictDecode[k8sPDB](t, where, doc)
			case "Secret":
				objs.secrets[h.Metadata.Name] = strictDecode[k8sSecret](t, where, doc)
			case "Service":
				objs.services[h.Metadata.Name] = strictDecode[k8sService](t, where, doc)
			default:
				t.Errorf("%s: a kind this test does not know; teach it", where)
			}
		}
		if !strings.HasPrefix(base, "kustomization") {
			defer func(base string) {
				if !slices.Contains(objs.files, base) {
					t.Errorf("kustomization.yaml does not list %s", base)
				}
			}(base)
		}
	}
	return objs
}

func strictDecode[T any](t *testing.T, where string, doc []byte) T {
	t.Helper()
	var v T
	strictYAML(t, where, doc, &v)
	return v
}

func strictYAML(t *testing.T, where string, doc []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

// commandEnvs returns the environment variables the command reads.
func commandEnvs(t *testing.T, name string) map[string]bool {
	t.Helper()
	var c cli
	k, err := kong.New(&c, vars())
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]bool{}
	for _, n := range k.Model.Children {
		if n.Name != name {
			continue
		}
		for _, group := range n.AllFlags(true) {
			for _, f := range group {
				for _, e := range f.Envs {
					envs[e] = true
				}
			}
		}
	}
	if len(envs) == 0 {
		t.Fatalf("command %s reads no environment variables", name)
	}
	return envs
}

// TestKubernetesManifests keeps deploy/kubernetes in step with the relay:
// a Deployment of two replicas that rolls without losing the active one,
// liveness on /healthz and readiness on /readyz at the metrics port the
// relay listens on, resources, only variables the relay knows, secrets
// mounted as files (never in variables), a PodDisruptionBudget and a
// Service that select the relay's pods, the migrate Job. Parsing only: no
// cluster here.
func TestKubernetesManifests(t *testing.T) {
	objs := loadK8s(t)
	d, ok := objs.deployments["outbox-relay"]
	if !ok {
		t.Fatal("no Deployment outbox-relay")
	}
	if d.APIVersion != "apps/v1" || d.Spec.Replicas != 2 {
		t.Errorf("Deployment: %s with %d replicas, want apps/v1 with 2 (active and standby)", d.APIVersion, d.Spec.Replicas)
	}
	if mu := d.Spec.Strategy.RollingUpdate.MaxUnavailable; d.Spec.Strategy.Type != "RollingUpdate" || mu != 0 {
		t.Errorf("Deployment strategy %s, maxUnavailable %v: want RollingUpdate with maxUnavailable 0 (the new pod is ready as the standby first)", d.Spec.Strategy.Type, mu)
	}
	podLabels := d.Spec.Template.Metadata.Labels
	if !selects(d.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, podLabels)
	}
	checkPod(t, "Deployment", d.Spec.Template, commandEnvs(t, "run"), objs)
	c := d.Spec.Template.Spec.Containers[0]
	port := metricsPort(t, c)
	for _, p := range []struct {
		name  string
		probe *k8sProbe
		path  string
	}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("relay container has no %s over HTTP", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s asks %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if !portIs(c, p.probe.HTTPGet.Port, port) {
			t.Errorf("%s asks port %v, not the metrics port %d", p.name, p.probe.HTTPGet.Port, port)
		}
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("relay resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < 15 {
		t.Error("terminationGracePeriodSeconds missing or under 15 s: the relay's drain needs time")
	}

	if len(objs.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(objs.pdbs))
	}
	for name, pdb := range objs.pdbs {
		if pdb.APIVersion != "policy/v1" || pdb.Spec.MinAvailable != 1 || !selects(pdb.Spec.Selector.MatchLabels, podLabels) {
			t.Errorf("PodDisruptionBudget %s: %s, minAvailable %v, selector %v: want policy/v1, 1, the relay's pods", name, pdb.APIVersion, pdb.Spec.MinAvailable, pdb.Spec.Selector.MatchLabels)
		}
	}
	for name, s := range objs.services {
		if !selects(s.Spec.Selector, podLabels) || len(s.Spec.Ports) == 0 || !portIs(c, s.Spec.Ports[0].TargetPort, port) {
			t.Errorf("Service %s does not reach the relay's metrics port", name)
		}
	}
	job, ok := objs.jobs["outbox-relay-migrate"]
	if !ok {
		t.Fatal("no Job outbox-relay-migrate")
	}
	checkPod(t, "Job", job.Spec.Template, commandEnvs(t, "migrate"), objs)
	if args := strings.Join(job.Spec.Template.Spec.Containers[0].Args, " "); !strings.HasPrefix(args, "migrate --relay-role ") {
		t.Errorf("migrate Job runs %q: want migrate --relay-role (the relay's least-privilege role)", args)
	}
}

// checkPod checks what every pod of the manifests must do: run as non-root
// with its secrets readable, read only the variables its command knows,
// hold no credentials in them, and find every file it is pointed at in a
// secret it mounts, under a key the Secret has.
func checkPod(t *testing.T, what string, pod k8sPodTemplate, known map[string]bool, objs *k8sObjects) {
	t.Helper()
	spec := pod.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", what, len(spec.Containers))
	}
	if sc := spec.SecurityContext; !sc.RunAsNonRoot || sc.RunAsUser == 0 || sc.FSGroup != sc.RunAsGroup {
		t.Errorf("%s securityContext %+v: want non-root, with fsGroup the user's group so it can read its secrets", what, sc)
	}
	c := spec.Containers[0]
	for _, e := range c.Env {
		if !known[e.Name] {
			t.Errorf("%s: variable %s is not one the command reads", what, e.Name)
		}
		if e.Name == "OUTBOX_PG_URL" || strings.Contains(e.Value, "@") {
			t.Errorf("%s: credentials in variable %s: mount a secret file (OUTBOX_PG_URL_FILE)", what, e.Name)
		}
		if strings.HasSuffix(e.Name, "_FILE") || strings.HasSuffix(e.Name, "_CREDS") {
			checkSecretFile(t, what, e.Name, e.Value, c, pod, objs)
		}
	}
}

func checkSecretFile(t *testing.T, what, name, file string, c k8sContainer, pod k8sPodTemplate, objs *k8sObjects) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if path.Dir(file) != m.MountPath {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			s, ok := objs.secrets[v.Secret.SecretName]
			if _, has := s.StringData[path.Base(file)]; !ok || !has {
				t.Errorf("%s: %s=%s: Secret %s has no key %s", what, name, file, v.Secret.SecretName, path.Base(file))
			}
			if !m.ReadOnly || v.Secret.DefaultMode&0o440 != 0o440 || v.Secret.DefaultMode&0o007 != 0 {
				t.Errorf("%s: secret volume %s: read-only mount, mode readable by owner and group only, want; got readOnly %v mode %o", what, v.Name, m.ReadOnly, v.Secret.DefaultMode)
			}
			return
		}
	}
	t.Errorf("%s: %s=%s is not in a mounted secret", what, name, file)
}

// metricsPort is the port the relay serves on (OUTBOX_METRICS_ADDR), which
// must be reachable from the kubelet and declared as a container port.
func metricsPort(t *testing.T, c k8sContainer) int {
	t.Helper()
	for _, e := range c.Env {
		if e.Name != "OUTBOX_METRICS_ADDR" {
			continue
		}
		host, p, err := net.SplitHostPort(e.Value)
		if err != nil || (host != "0.0.0.0" && host != "" && host != "::") {
			t.Fatalf("OUTBOX_METRICS_ADDR=%s: the probes come from outside the pod; listen on 0.0.0.0", e.Value)
		}
		for _, cp := range c.Ports {
			if p == strconv.Itoa(cp.ContainerPort) {
				return cp.ContainerPort
			}
		}
		t.Fatalf("OUTBOX_METRICS_ADDR=%s: no containerPort %s", e.Value, p)
	}
	t.Fatal("OUTBOX_METRICS_ADDR not set: the default listens on loopback, out of the probes' reach")
	return 0
}

// portIs reports whether ref (a number or a port name) is port.
func portIs(c k8sContainer, ref any, port int) bool {
	switch r := ref.(type) {
	case int:
		return r == port
	case string:
		for _, cp := range c.Ports {
			if cp.Name == r {
				return cp.ContainerPort == port
			}
		}
	}
	return false
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
