// Validates rendered ServiceMonitor and PrometheusRule objects (a JSON array, argv[2])
// against the prometheus-operator CRD schemas of @kubernetes-models/prometheus-operator
// (pinned in package-lock.json). Run by scripts/package-tests from the directory where
// it installed that package. Exit 1 on the first invalid object.
import { readFileSync } from "node:fs";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";

const models = { ServiceMonitor, PrometheusRule };
const docs = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = 0;
for (const doc of docs) {
  const Model = models[doc.kind];
  const what = `${doc.kind}/${doc.metadata?.name}`;
  if (!Model || doc.apiVersion !== "monitoring.coreos.com/v1") {
    console.log(`    FAILED: ${what}: no schema for ${doc.apiVersion} ${doc.kind}`);
    failed++;
    continue;
  }
  try {
    new Model(doc).validate();
    console.log(`    verified: ${what} matches the prometheus-operator CRD schema (monitoring.coreos.com/v1)`);
  } catch (e) {
    console.log(`    FAILED: ${what}: ${e.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
