//! Onboarding and tenancy operations: departments, tenants, the inventory, reassignments, namespace rules.

use gpuledger_api::{
    Items,
    policy::Impact,
    tenancy::{
        CreatedDepartment, CreatedModel, CreatedProfile, CreatedShareBasis, CreatedTenant, CreatedTimeslicing,
        Department, Inventory, NamespaceOwnership, NamespaceRule, Reassignment, Tenant, Updated,
    },
    usage,
};

use super::Op;

/// Departments, tenants, the inventory, endpoint aliases (onboarding).
pub(super) fn operations() -> Vec<Op> {
    vec![
        Op::get("/api/v1/departments", "Departments with their tenant counts")
            .token()
            .answers::<Items<Department>>(200, "{items}")
            .errors(&[401]),
        Op::post("/api/v1/departments", "Create a department: {name}. Admins")
            .token()
            .answers::<CreatedDepartment>(201, "created")
            .errors(&[401, 403, 409, 422]),
        Op::get("/api/v1/tenants", "Tenants with their department and namespaces in force")
            .token()
            .answers::<Items<Tenant>>(200, "{items}")
            .errors(&[401]),
        Op::post(
            "/api/v1/tenants",
            "Create a tenant: {name, department (name or ID)}; namespaces whose labels named it and usage kept under \
             its name are taken over. Admins",
        )
        .token()
        .answers::<CreatedTenant>(201, "created")
        .errors(&[401, 403, 404, 409, 422]),
        Op::get(
            "/api/v1/inventory",
            "The approved GPU inventory: classes, models, MIG/vGPU profiles, time-slicing, with validity",
        )
        .token()
        .answers::<Inventory>(200, "the inventory")
        .errors(&[401]),
        Op::post(
            "/api/v1/inventory/models",
            "A GPU model's class from valid_from: {model, gpu_class, memory_mib?, valid_from}; ends the entry in \
             force; recomputes the allocations it concerns. Admin or finance",
        )
        .token()
        .answers::<CreatedModel>(201, "created")
        .errors(&[401, 403, 409, 422]),
        Op::post(
            "/api/v1/inventory/profiles",
            "A MIG or vGPU profile's fraction: {kind: mig|vgpu, model, profile, fraction (3/7), valid_from}. Admin \
             or finance",
        )
        .token()
        .answers::<CreatedProfile>(201, "created")
        .errors(&[401, 403, 409, 422]),
        Op::post(
            "/api/v1/inventory/timeslicing",
            "A declared time-slicing policy: {cluster, name, replicas, valid_from}. Admin or finance",
        )
        .token()
        .answers::<CreatedTimeslicing>(201, "created")
        .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/inventory/share-basis",
            "Which share soft-shared allocations (HAMi, Volcano vGPU, Run:ai, gpushare) pay from valid_from: \
             {cluster?, basis: compute|memory|larger, valid_from}; no cluster: the organization's default. Admin or \
             finance",
        )
        .token()
        .answers::<CreatedShareBasis>(201, "created; soft-shared allocations since valid_from priced again")
        .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/inventory/impact",
            "Preview an inventory change before saving it: ?period=YYYY-MM (required); body {model: ModelBody} | \
             {profile: ProfileBody} | {timeslicing: TimeslicingBody}, each exactly as its save endpoint takes it. \
             Answers the month as it stands (approved) and with the change (draft), as the policy impact does; \
             nothing is saved. Admin or finance",
        )
        .token()
        .answers::<Impact>(200, "the comparison (nothing saved)")
        .errors(&[401, 403, 404, 409, 422]),
        Op::patch(
            "/api/v1/departments/{department}",
            "Rename, retire and/or set the journal accounts of a department: {name?, retired_from?, cost_center?, \
             gl_account?, reason} (an account null: cleared). Admins",
        )
        .token()
        .answers::<Updated>(200, "what changed")
        .errors(&[401, 403, 404, 409, 422]),
        Op::patch("/api/v1/tenants/{tenant}", "Rename and/or retire a tenant: {name?, retired_from?, reason}. Admins")
            .token()
            .answers::<Updated>(200, "what changed")
            .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/tenancy/reassignments",
            "Reassign a namespace to a tenant from an instant: {cluster, namespace, tenant, valid_from, reason}. \
             History is closed and reopened; closed months get corrections at the next close. Admins",
        )
        .token()
        .answers::<Reassignment>(201, "the ownership entry opened")
        .errors(&[401, 403, 404, 409, 422]),
        Op::post(
            "/api/v1/tenancy/namespace-rules",
            "A rule for namespaces without labels: {cluster?, match (exact|prefix), pattern, tenant, valid_from, \
             reason}. Admins",
        )
        .token()
        .answers::<NamespaceRule>(201, "the rule, with the namespaces it gave an owner to")
        .errors(&[401, 403, 404, 409, 422]),
        Op::get("/api/v1/tenancy/namespace-rules", "Rules for namespaces without labels, with their validity")
            .token()
            .answers::<Items<NamespaceRule>>(200, "{items}")
            .errors(&[401]),
        Op::get("/api/v1/tenancy/ownership", "A namespace's ownership history, oldest first")
            .token()
            .answers::<NamespaceOwnership>(200, "{cluster, namespace, namespace_uid, entries}")
            .errors(&[401, 404, 422]),
        Op::get("/api/v1/endpoints/{endpoint}/aliases", "An endpoint's gateway-key and team aliases. Admins")
            .token()
            .answers::<usage::Aliases>(200, "{endpoint, aliases}")
            .errors(&[401, 403]),
        Op::put(
            "/api/v1/endpoints/{endpoint}/aliases",
            "Replace an endpoint's aliases: {aliases: [{kind: gateway_key|team, alias, tenant}]}; records kept \
             without a tenant that they resolve are attributed. Admins",
        )
        .token()
        .answers::<usage::AliasesSet>(200, "{endpoint, aliases, attributed}")
        .errors(&[401, 403, 404, 409, 422]),
    ]
}
