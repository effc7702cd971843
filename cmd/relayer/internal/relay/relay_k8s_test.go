package relay

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The Kubernetes objects of docs/relay.md, as far as the page writes them.
// Their YAML is decoded strictly (yaml.Decoder.KnownFields): a key these
// types do not have, such as a misspelt readOnlyRootFileSystem, fails the
// test. The field names are the Kubernetes API's.
type (
	k8sMeta struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	k8sSecret struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Metadata   k8sMeta           `yaml:"metadata"`
		Type       string            `yaml:"type"`
		StringData map[string]string `yaml:"stringData"`
	}
	k8sSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	k8sDeployment struct {
		APIVersion string  `yaml:"apiVersion"`
		Kind       string  `yaml:"kind"`
		Metadata   k8sMeta `yaml:"metadata"`
		Spec       struct {
			Replicas int         `yaml:"replicas"`
			Selector k8sSelector `yaml:"selector"`
			Strategy struct {
				Type          string `yaml:"type"`
				RollingUpdate struct {
					MaxUnavailable intOrString `yaml:"maxUnavailable"`
					MaxSurge       intOrString `yaml:"maxSurge"`
				} `yaml:"rollingUpdate"`
			} `yaml:"strategy"`
			Template struct {
				Metadata k8sMeta `yaml:"metadata"`
				Spec     k8sPod  `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	k8sPod struct {
		TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
		SecurityContext               struct {
			RunAsNonRoot   *bool `yaml:"runAsNonRoot"`
			RunAsUser      *int  `yaml:"runAsUser"`
			RunAsGroup     *int  `yaml:"runAsGroup"`
			SeccompProfile struct {
				Type string `yaml:"type"`
			} `yaml:"seccompProfile"`
		} `yaml:"securityContext"`
		InitContainers []k8sContainer `yaml:"initContainers"`
		Containers     []k8sContainer `yaml:"containers"`
	}
	k8sContainer struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom struct {
				SecretKeyRef struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
		StartupProbe   *k8sProbe `yaml:"startupProbe"`
		LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
		ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	}
	k8sProbe struct {
		HTTPGet struct {
			Path string      `yaml:"path"`
			Port intOrString `yaml:"port"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
	k8sPodDisruptionBudget struct {
		APIVersion string  `yaml:"apiVersion"`
		Kind       string  `yaml:"kind"`
		Metadata   k8sMeta `yaml:"metadata"`
		Spec       struct {
			MinAvailable   *intOrString `yaml:"minAvailable"`
			MaxUnavailable *intOrString `yaml:"maxUnavailable"`
			Selector       k8sSelector  `yaml:"selector"`
		} `yaml:"spec"`
	}
	k8sService struct {
		APIVersion string  `yaml:"apiVersion"`
		Kind       string  `yaml:"kind"`
		Metadata   k8sMeta `yaml:"metadata"`
		Spec       struct {
			ClusterIP string            `yaml:"clusterIP"`
			Selector  map[string]string `yaml:"selector"`
			Ports     []struct {
				Name       string      `yaml:"name"`
				Port       int         `yaml:"port"`
				TargetPort intOrString `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
)

// intOrString is a Kubernetes IntOrString: a number or a name (a port's,
// or a percentage).
type intOrString string

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or a string", n.Line)
	}
	*v = intOrString(n.Value)
	return nil
}

// prometheusRules is a Prometheus rule file, as far as the page uses it.
type prometheusRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// The Kubernetes example of docs/relay.md decodes strictly into the API's
// field names, and deploys the relay as the page says: every container
// non-root, on a read-only root file system, without privilege escalation
// or capabilities, with resource requests and a memory limit; probes on a
// port the container names; secrets the Secret holds; a
// PodDisruptionBudget and a metrics Service that select the Deployment's
// pods.
func TestRelayDocsKubernetesManifests(t *testing.T) {
	t.Parallel()
	var (
		secrets     []k8sSecret
		deployments []k8sDeployment
		budgets     []k8sPodDisruptionBudget
		services    []k8sService
	)
	for _, b := range fencedBlocks(readDoc(t, relayDocPath)) {
		if b.lang != "yaml" {
			continue
		}
		text := strings.Join(b.lines, "\n")
		// Two decoders walk the block's documents together: one reads each
		// document's kind, the other decodes it strictly by that kind.
		kinds := yaml.NewDecoder(strings.NewReader(text))
		strict := yaml.NewDecoder(strings.NewReader(text))
		strict.KnownFields(true)
		for doc := 1; ; doc++ {
			var head struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
			}
			err := kinds.Decode(&head)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: the YAML block at line %d, document %d: %v", relayDocPath, b.start, doc, err)
			}
			var target any
			switch head.APIVersion + " " + head.Kind {
			case "v1 Secret":
				secrets = append(secrets, k8sSecret{})
				target = &secrets[len(secrets)-1]
			case "apps/v1 Deployment":
				deployments = append(deployments, k8sDeployment{})
				target = &deployments[len(deployments)-1]
			case "policy/v1 PodDisruptionBudget":
				budgets = append(budgets, k8sPodDisruptionBudget{})
				target = &budgets[len(budgets)-1]
			case "v1 Service":
				services = append(services, k8sService{})
				target = &services[len(services)-1]
			case " ":
				// Not a Kubernetes object: the page's Prometheus alerting
				// rules, decoded as strictly.
				target = &prometheusRules{}
			default:
				t.Fatalf("%s: the YAML block at line %d, document %d: %q %q is no object this test knows", relayDocPath, b.start, doc, head.APIVersion, head.Kind)
			}
			if err := strict.Decode(target); err != nil {
				t.Errorf("%s: the YAML block at line %d, document %d (%s): %v", relayDocPath, b.start, doc, head.Kind, err)
			}
		}
	}
	if len(secrets) != 1 || len(deployments) != 1 || len(budgets) != 1 || len(services) != 1 {
		t.Fatalf("%s: %d Secrets, %d Deployments, %d PodDisruptionBudgets, %d Services; want one of each",
			relayDocPath, len(secrets), len(deployments), len(budgets), len(services))
	}
	secret, d, pdb, svc := secrets[0], deployments[0], budgets[0], services[0]
	pod := d.Spec.Template.Spec
	podLabels := d.Spec.Template.Metadata.Labels
	if len(podLabels) == 0 || !selects(d.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, podLabels)
	}

	uid, _, _ := strings.Cut(imageUser(t), ":")
	if sc := pod.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || strconv.Itoa(*sc.RunAsUser) != uid {
		t.Errorf("the pod's securityContext: want runAsNonRoot and runAsUser %s, the image's user", uid)
	}
	if len(pod.InitContainers) == 0 || len(pod.Containers) == 0 {
		t.Fatalf("the pod has %d init containers and %d containers", len(pod.InitContainers), len(pod.Containers))
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		sc := c.SecurityContext
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			!slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
			t.Errorf("container %s: want readOnlyRootFilesystem, no allowPrivilegeEscalation, capabilities dropping ALL", c.Name)
		}
		if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
			t.Errorf("container %s: want cpu and memory requests and a memory limit, have %+v", c.Name, c.Resources)
		}
		if len(c.Command) > 0 {
			t.Errorf("container %s sets command %v: the image's entrypoint is the relayer binary, give args only", c.Name, c.Command)
		}
		for _, e := range c.Env {
			if ref := e.ValueFrom.SecretKeyRef; ref.Name != "" && (ref.Name != secret.Metadata.Name || secret.StringData[ref.Key] == "") {
				t.Errorf("container %s: %s comes from secret %s key %s, which the Secret does not hold", c.Name, e.Name, ref.Name, ref.Key)
			}
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
		for _, p := range []*k8sProbe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
			if p != nil && !ports[string(p.HTTPGet.Port)] {
				t.Errorf("container %s: a probe of %s on port %q, which the container does not name", c.Name, p.HTTPGet.Path, p.HTTPGet.Port)
			}
		}
	}
	relay := pod.Containers[0]
	if relay.ReadinessProbe == nil || relay.ReadinessProbe.HTTPGet.Path != "/readyz" || relay.LivenessProbe == nil || relay.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("the relay's container: want readiness on /readyz and liveness on /healthz")
	}

	if !selects(pdb.Spec.Selector.MatchLabels, podLabels) || pdb.Spec.MinAvailable == nil && pdb.Spec.MaxUnavailable == nil {
		t.Errorf("the PodDisruptionBudget: selector %v (pods %v), want it to select the relays and bound them", pdb.Spec.Selector.MatchLabels, podLabels)
	}
	if pdb.Spec.MinAvailable != nil {
		if n, err := strconv.Atoi(string(*pdb.Spec.MinAvailable)); err == nil && n >= d.Spec.Replicas {
			t.Errorf("the PodDisruptionBudget keeps %d of %d replicas: no pod could ever be evicted", n, d.Spec.Replicas)
		}
	}
	if !selects(svc.Spec.Selector, podLabels) || len(svc.Spec.Ports) == 0 {
		t.Errorf("the Service: selector %v (pods %v), ports %v", svc.Spec.Selector, podLabels, svc.Spec.Ports)
	}
	for _, p := range svc.Spec.Ports {
		named := false
		for _, cp := range relay.Ports {
			named = named || string(p.TargetPort) == cp.Name || string(p.TargetPort) == strconv.Itoa(cp.ContainerPort)
		}
		if !named {
			t.Errorf("the Service's port %s targets %q, which the relay's container does not have", p.Name, p.TargetPort)
		}
	}
}

// selects reports whether a selector's labels are all among labels.
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

// scriptUser is the line of scripts/image that names the image's user.
var scriptUser = regexp.MustCompile(`(?m)^user=(\S+)$`)

// imageUser returns the user the image runs as, read from scripts/image
// (the deployable's tests hold the image to it).
func imageUser(t *testing.T) string {
	t.Helper()
	m := scriptUser.FindStringSubmatch(readDoc(t, imageScriptPath))
	if m == nil {
		t.Fatalf("%s names no user=", imageScriptPath)
	}
	return m[1]
}
