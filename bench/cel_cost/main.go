// Command cel_cost measures what the API server's CEL validation of a SpeculativeDeployment costs, per CRD:
// it runs kube-apiserver's own validator (k8s.io/apiextensions-apiserver's schema/cel, the version the local
// cluster runs) on the example object, as on a create and as on a status update (the old object beside it,
// ratcheting on), and prints ns, bytes and allocations per validation (testing.Benchmark). Allocations are
// counted, not timed: they do not move with the load of a shared machine.
//
//	go run . -object OBJECT.json CRD.json...
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
)

func load(path string, into any) {
	data, err := os.ReadFile(path)
	if err == nil {
		err = utiljson.Unmarshal(data, into) // integers as int64, as the API server decodes them
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
		os.Exit(1)
	}
}

func structural(path string) *structuralschema.Structural {
	var crd apiextensionsv1.CustomResourceDefinition
	load(path, &crd)
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema, internal, nil); err != nil {
		panic(err)
	}
	s, err := structuralschema.NewStructural(internal)
	if err != nil {
		panic(err)
	}
	return s
}

func main() {
	objectPath := flag.String("object", "", "the object (JSON) written")
	flag.Parse()
	for _, path := range flag.Args() {
		s := structural(path)
		var obj map[string]any
		load(*objectPath, &obj)
		structuraldefaulting.Default(obj, s) // as the API server, before validation
		var old map[string]any
		load(*objectPath, &old)
		structuraldefaulting.Default(old, s)
		validator := cel.NewValidator(s, true, celconfig.PerCallLimit)
		ctx := context.Background()
		if errs, _ := validator.Validate(ctx, nil, s, obj, nil, celconfig.RuntimeCELCostBudget); len(errs) > 0 {
			fmt.Fprintf(os.Stderr, "%s: the object is refused: %v\n", path, errs)
			os.Exit(1)
		}
		create := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				validator.Validate(ctx, nil, s, obj, nil, celconfig.RuntimeCELCostBudget)
			}
		})
		update := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				correlated := common.NewCorrelatedObject(obj, old, &model.Structural{Structural: s})
				validator.Validate(ctx, nil, s, obj, old, celconfig.RuntimeCELCostBudget, cel.WithRatcheting(correlated))
			}
		})
		out, _ := json.Marshal(map[string]any{"crd": path,
			"create": map[string]any{"ns": create.NsPerOp(), "bytes": create.AllocedBytesPerOp(), "allocs": create.AllocsPerOp()},
			"update": map[string]any{"ns": update.NsPerOp(), "bytes": update.AllocedBytesPerOp(), "allocs": update.AllocsPerOp()}})
		fmt.Println(string(out))
	}
}
