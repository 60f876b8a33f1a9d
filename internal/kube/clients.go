package kube

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
)

// Scheme holds the API groups manifold reads and writes: core (Services, Nodes,
// Events), discovery (EndpointSlices) and coordination (the controller's Lease). It
// stands in for client-go's kubernetes/scheme, which registers every group of k8s.io/api
// and so links all of them (a third of bin/manifold's code: issue 26); for the same
// reason nothing here imports client-go's typed clients, informer factory or leader
// election, which import that scheme.
var Scheme = runtime.NewScheme()

var codecs = serializer.NewCodecFactory(Scheme)

func init() {
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(discoveryv1.AddToScheme(Scheme))
	utilruntime.Must(coordinationv1.AddToScheme(Scheme))
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
}

// The groups' versions, as their clients address them.
var (
	CoreV1         = schema.GroupVersion{Version: "v1"}
	DiscoveryV1    = discoveryv1.SchemeGroupVersion
	CoordinationV1 = coordinationv1.SchemeGroupVersion
)

// Client is the REST client of one API group version of the cluster cfg reaches,
// decoding into Scheme's types.
func Client(cfg *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}
