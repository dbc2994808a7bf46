package hostprep

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// KubeClient is the API server as hostprep and the NRI plugin use it:
// client-go REST clients of the two groups they touch (core/v1 for nodes and
// namespaces, apps/v1 for DaemonSets), sharing one connection pool and one
// set of credentials. Why not client-go's typed clientset: its scheme
// registers every API group, which made nvmock 2.5 times larger (16 to 42
// MB) and every run of it, the plugin's and exec's included, 11 MB heavier;
// these few calls need two groups.
type KubeClient struct {
	core, apps *rest.RESTClient
}

// kubeCodecs encode and decode the two API groups used.
type kubeCodecs struct {
	codecs serializer.CodecFactory
	params runtime.ParameterCodec
}

// kube makes the codecs on first use: every nvmock command would pay for
// them at its start (nvmock exec twice).
var kube = sync.OnceValue(func() kubeCodecs {
	s := runtime.NewScheme()
	// Cannot fail: the two groups' types are fixed.
	_ = corev1.AddToScheme(s)
	_ = appsv1.AddToScheme(s)
	return kubeCodecs{serializer.NewCodecFactory(s), runtime.NewParameterCodec(s)}
})

// NewKubeClient makes the clients for cfg: in a pod rest.InClusterConfig
// (InClusterClient), in tests a kubeconfig or internal/kubetest.
func NewKubeClient(cfg *rest.Config) (*KubeClient, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "nvmock"
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	group := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = kube().codecs.WithoutConversion()
		return rest.RESTClientForConfigAndClient(c, hc)
	}
	core, err := group(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	apps, err := group(appsv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return &KubeClient{core: core, apps: apps}, nil
}

// InClusterClient is the client of the pod this runs in, from the service
// account Kubernetes mounts (rest.InClusterConfig); ok is false outside a
// cluster. The client re-reads the token file (at most a minute after it
// last did), so it follows the kubelet rotating the projected token.
func InClusterClient() (c *KubeClient, ok bool, err error) {
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("in-cluster credentials: %w", err)
	}
	c, err = NewKubeClient(cfg)
	return c, true, err
}

// NamespaceAPI is what the plugin's namespace watch asks of the API server:
// a label-selected list, and a watch from its resourceVersion.
type NamespaceAPI interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Namespaces is the namespace API.
func (c *KubeClient) Namespaces() NamespaceAPI { return namespaces{c.core} }

type namespaces struct{ rc *rest.RESTClient }

func (n namespaces) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error) {
	var l corev1.NamespaceList
	err := n.rc.Get().Resource("namespaces").VersionedParams(&opts, kube().params).Do(ctx).Into(&l)
	return &l, err
}

func (n namespaces) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	r := n.rc.Get().Resource("namespaces").VersionedParams(&opts, kube().params)
	if opts.TimeoutSeconds != nil {
		r = r.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return r.Watch(ctx)
}

// patchNode applies a strategic-merge patch to a node as field manager nvmock.
func (c *KubeClient) patchNode(ctx context.Context, node string, patch []byte) error {
	return c.core.Patch(types.StrategicMergePatchType).Resource("nodes").Name(node).
		VersionedParams(&metav1.PatchOptions{FieldManager: "nvmock"}, kube().params).Body(patch).Do(ctx).Error()
}

func (c *KubeClient) getNode(ctx context.Context, node string) (*corev1.Node, error) {
	var n corev1.Node
	err := c.core.Get().Resource("nodes").Name(node).Do(ctx).Into(&n)
	return &n, err
}

func (c *KubeClient) getDaemonSet(ctx context.Context, namespace, name string) (*appsv1.DaemonSet, error) {
	var ds appsv1.DaemonSet
	err := c.apps.Get().Namespace(namespace).Resource("daemonsets").Name(name).Do(ctx).Into(&ds)
	return &ds, err
}

// DeleteDaemonSetAndWait deletes a DaemonSet in the foreground (its pods
// first, each through its preStop hook) and returns once it is gone, or when
// ctx ends. A DaemonSet already gone is no error.
func (c *KubeClient) DeleteDaemonSetAndWait(ctx context.Context, namespace, name string, poll time.Duration) error {
	fg := metav1.DeletePropagationForeground
	err := c.apps.Delete().Namespace(namespace).Resource("daemonsets").Name(name).
		Body(&metav1.DeleteOptions{PropagationPolicy: &fg}).Do(ctx).Error()
	deleting := false
	for {
		if apierrors.IsNotFound(err) {
			return nil
		}
		// client-go's rate limiter refuses a call that would end after the
		// deadline, before the context ends: the wait ran out all the same.
		if err != nil && deleting && (ctx.Err() != nil || strings.Contains(err.Error(), "would exceed context deadline")) {
			return fmt.Errorf("DaemonSet %s/%s is still being deleted: %w", namespace, name, context.DeadlineExceeded)
		}
		if err != nil {
			return fmt.Errorf("delete DaemonSet %s/%s: %w", namespace, name, err)
		}
		deleting = true
		select {
		case <-ctx.Done():
			return fmt.Errorf("DaemonSet %s/%s is still being deleted: %w", namespace, name, ctx.Err())
		case <-time.After(poll):
		}
		_, err = c.getDaemonSet(ctx, namespace, name)
	}
}
