//! `cairn.v1.AuthService`: principals and their tokens, for admins.

use cairn_api as pb;
use cairn_api::auth_service_server::AuthService;
use cairn_core::access::{self, Caller, Principal, Role};
use cairn_core::error::{Error, Excerpt, Result};
use cairn_store::ops;
use cairn_store::records::PrincipalRecord;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::{State, caller};
use crate::auth::{BOOTSTRAP_ADMIN, mint_token, token_sha256};
use crate::convert;
use crate::status::status;

/// Default and maximum `page_size` of `ListPrincipals`.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// Most agent ids, and most session roots, one principal may hold.
pub const MAX_SCOPE_ENTRIES: usize = 256;

/// The auth service.
#[derive(Clone, Debug)]
pub struct AuthApi {
    state: State,
}

impl AuthApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        AuthApi { state }
    }

    async fn create(
        &self,
        caller: &Caller,
        req: pb::CreatePrincipalRequest,
    ) -> Result<pb::CreatePrincipalResponse> {
        access::check_admin(caller)?;
        let pb::CreatePrincipalRequest { principal } = req;
        let principal = convert::principal_in(principal.unwrap_or_default())?;
        let limits = &self.state.policy.limits;
        limits.check_resource_id("principal.principal_id", &principal.principal_id)?;
        if principal.principal_id == BOOTSTRAP_ADMIN {
            return Err(Error::invalid(
                "principal.principal_id",
                "`admin` is the bootstrap admin of --admin-token-file",
            ));
        }
        // Every call of the principal checks these sets: bounded, so that
        // nobody can make each call slow.
        for (field, what, n) in [
            (
                "principal.agent_ids",
                "agent ids per principal",
                principal.agent_ids.len(),
            ),
            (
                "principal.session_roots",
                "session roots per principal",
                principal.session_roots.len(),
            ),
        ] {
            cairn_core::Limits::check_count(field, what, MAX_SCOPE_ENTRIES, n)?;
        }
        for (i, a) in principal.agent_ids.iter().enumerate() {
            limits.check_resource_id(&format!("principal.agent_ids[{i}]"), a)?;
        }
        for (i, r) in principal.session_roots.iter().enumerate() {
            limits.check_resource_id(&format!("principal.session_roots[{i}]"), r)?;
        }
        if principal.has(Role::Agent) && principal.agent_ids.is_empty() {
            return Err(Error::invalid(
                "principal.agent_ids",
                "an agent acts as at least one agent id",
            ));
        }
        let token = mint_token()?;
        let record = PrincipalRecord {
            principal,
            token_sha256: token_sha256(&token),
            ..PrincipalRecord::default()
        };
        let (stored, revision) = self
            .state
            .store
            .write(0, move |ctx| ops::create_principal(ctx, record.clone()))
            .await?;
        Ok(pb::CreatePrincipalResponse {
            principal: Some(convert::principal_out(&stored)),
            token,
            revision,
        })
    }

    async fn list(
        &self,
        caller: &Caller,
        req: pb::ListPrincipalsRequest,
    ) -> Result<pb::ListPrincipalsResponse> {
        access::check_admin(caller)?;
        let pb::ListPrincipalsRequest {
            page_size,
            page_token,
        } = req;
        let limit = match usize::try_from(page_size) {
            Ok(0) => DEFAULT_PAGE,
            Ok(n) => n.min(MAX_PAGE),
            Err(_) => return Err(Error::invalid("page_size", "must not be negative")),
        };
        let after = (!page_token.is_empty()).then_some(page_token);
        if let Some(a) = &after {
            self.state
                .policy
                .limits
                .check_resource_id("page_token", a)?;
        }
        let (mut page, revision) = self
            .state
            .store
            .read(move |v| {
                Ok((
                    v.principals_after(after.as_deref(), limit + 1)?,
                    v.revision()?,
                ))
            })
            .await?;
        let next_page_token = if page.len() > limit {
            page.truncate(limit);
            page.last()
                .map(|p| p.principal.principal_id.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(pb::ListPrincipalsResponse {
            principals: page.iter().map(convert::principal_out).collect(),
            next_page_token,
            revision,
        })
    }

    async fn delete(
        &self,
        caller: &Caller,
        req: pb::DeletePrincipalRequest,
    ) -> Result<pb::DeletePrincipalResponse> {
        access::check_admin(caller)?;
        let pb::DeletePrincipalRequest {
            principal_id,
            expected_revision,
        } = req;
        self.state
            .policy
            .limits
            .check_resource_id("principal_id", &principal_id)?;
        let revision = self
            .state
            .store
            .write(0, move |ctx| {
                ops::delete_principal(ctx, &principal_id, expected_revision)
            })
            .await?;
        Ok(pb::DeletePrincipalResponse { revision })
    }

    async fn rotate(
        &self,
        caller: &Caller,
        req: pb::RotateTokenRequest,
    ) -> Result<pb::RotateTokenResponse> {
        access::check_admin(caller)?;
        let pb::RotateTokenRequest { principal_id } = req;
        self.state
            .policy
            .limits
            .check_resource_id("principal_id", &principal_id)?;
        let token = mint_token()?;
        let hash = token_sha256(&token);
        let (_, revision) = self
            .state
            .store
            .write(0, move |ctx| ops::rotate_token(ctx, &principal_id, &hash))
            .await?;
        Ok(pb::RotateTokenResponse { token, revision })
    }

    fn who_am_i(caller: &Caller) -> pb::WhoAmIResponse {
        let principal = match caller {
            Caller::Principal(p) => p.clone(),
            Caller::Open => Principal {
                principal_id: "anonymous".into(),
                roles: [Role::Admin].into_iter().collect(),
                ..Principal::default()
            },
        };
        pb::WhoAmIResponse {
            principal: Some(convert::principal_out(&PrincipalRecord {
                principal,
                ..PrincipalRecord::default()
            })),
        }
    }
}

#[tonic::async_trait]
impl AuthService for AuthApi {
    #[instrument(skip_all, fields(principal_id = %Excerpt(request.get_ref().principal.as_ref().map_or("", |p| p.principal_id.as_str()))))]
    async fn create_principal(
        &self,
        request: Request<pb::CreatePrincipalRequest>,
    ) -> Result<Response<pb::CreatePrincipalResponse>, Status> {
        let caller = caller(&request)?;
        self.create(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all)]
    async fn list_principals(
        &self,
        request: Request<pb::ListPrincipalsRequest>,
    ) -> Result<Response<pb::ListPrincipalsResponse>, Status> {
        let caller = caller(&request)?;
        self.list(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(principal_id = %Excerpt(&request.get_ref().principal_id)))]
    async fn delete_principal(
        &self,
        request: Request<pb::DeletePrincipalRequest>,
    ) -> Result<Response<pb::DeletePrincipalResponse>, Status> {
        let caller = caller(&request)?;
        self.delete(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(principal_id = %Excerpt(&request.get_ref().principal_id)))]
    async fn rotate_token(
        &self,
        request: Request<pb::RotateTokenRequest>,
    ) -> Result<Response<pb::RotateTokenResponse>, Status> {
        let caller = caller(&request)?;
        self.rotate(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all)]
    async fn who_am_i(
        &self,
        request: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIResponse>, Status> {
        let caller = caller(&request)?;
        Ok(Response::new(Self::who_am_i(&caller)))
    }
}
