// The OpenID provider the login end-to-end tests run against: oidc-provider with its development login form
// (any login name, any password), one static confidential client, PKCE (S256) required, consent granted
// automatically, and RP-initiated logout behind a one-button confirm page.
//
// Environment:
//   OIDC_PORT                        listen on 127.0.0.1:PORT; the issuer is http://127.0.0.1:PORT
//   OIDC_CLIENT_ID, OIDC_CLIENT_SECRET
//   OIDC_REDIRECT_URIS               comma-separated
//   OIDC_POST_LOGOUT_REDIRECT_URIS   comma-separated, may be empty
//   OIDC_EXIT_ON_STDIN_EOF=1         also exit when stdin closes (the Rust harness sets it)
//
// Prints exactly one line `ready http://127.0.0.1:PORT` on stdout once listening; exits on SIGTERM/SIGINT.
// Test only: development signing keys are generated at start, nothing is persisted.

import { randomBytes } from 'node:crypto';
import Provider from 'oidc-provider';

function required(name) {
  const value = process.env[name];
  if (value === undefined || value === '') {
    console.error(`provider.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
}

const list = (value) => (value ?? '').split(',').map((s) => s.trim()).filter(Boolean);

const port = Number(required('OIDC_PORT'));
const issuer = `http://127.0.0.1:${port}`;
const clientId = required('OIDC_CLIENT_ID');
const clientSecret = required('OIDC_CLIENT_SECRET');
const redirectUris = list(required('OIDC_REDIRECT_URIS'));
const postLogoutRedirectUris = list(process.env.OIDC_POST_LOGOUT_REDIRECT_URIS);

// Groups by login name; anyone else gets none.
const GROUPS = {
  ada: ['gl-admins'],
  fin: ['gl-finance'],
  dee: ['gl-dept-research'],
  mo: ['gl-dept-research', 'gl-dept-platform'],
  vic: ['gl-viewers'],
};

const SCOPES = ['openid', 'email', 'profile', 'groups'];
const CLAIMS = {
  openid: ['sub'],
  email: ['email', 'email_verified'],
  profile: ['name'],
  groups: ['groups'],
};

// Small pages without external resources (the stock ones import a web font).
const page = (title, body) => `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>${title}</title></head>
<body>${body}</body></html>`;

const configuration = {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: redirectUris,
      post_logout_redirect_uris: postLogoutRedirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  // The client is registered with client_secret_basic; oidc-provider accepts the secret in the form body
  // (client_secret_post) too for a client with either method.
  clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
  responseTypes: ['code'],
  pkce: { required: () => true },
  scopes: SCOPES,
  claims: CLAIMS,
  // Scope claims (groups, email, name) go into the ID token too, not only to userinfo.
  conformIdTokenClaims: false,
  async findAccount(_ctx, sub) {
    return {
      accountId: sub,
      async claims() {
        return {
          sub,
          email: `${sub}@example.test`,
          email_verified: true,
          name: sub.charAt(0).toUpperCase() + sub.slice(1),
          groups: GROUPS[sub] ?? [],
        };
      },
    };
  },
  // Consent is granted automatically: whatever is requested is added to the session's grant for the client.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    let grant = grantId ? await ctx.oidc.provider.Grant.find(grantId) : undefined;
    if (!grant) {
      grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    }
    grant.addOIDCScope([...ctx.oidc.requestParamOIDCScopes].join(' '));
    const claims = [...ctx.oidc.requestParamClaims];
    if (claims.length) grant.addOIDCClaims(claims);
    await grant.save();
    return grant;
  },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: {
      enabled: true,
      // The confirm page: a hidden form `#op.logoutForm` (oidc-provider's) and two buttons; `#logout-yes`
      // signs out, `#logout-no` keeps the session. Either way the browser goes on to the
      // post_logout_redirect_uri (when one was given and registered) or to the success page below.
      async logoutSource(ctx, form) {
        ctx.type = 'html';
        ctx.body = page(
          'Logout Request',
          `<h1>Sign out from ${ctx.host}?</h1>
${form}
<button id="logout-yes" type="submit" form="op.logoutForm" name="logout" value="yes">Yes, sign me out</button>
<button id="logout-no" type="submit" form="op.logoutForm">No, stay signed in</button>`,
        );
      },
      async postLogoutSuccessSource(ctx) {
        ctx.type = 'html';
        ctx.body = page('Signed out', '<h1 id="logged-out">Signed out</h1>');
      },
    },
  },
  async renderError(ctx, out) {
    ctx.type = 'html';
    const rows = Object.entries(out)
      .map(([k, v]) => `<dt>${k}</dt><dd class="${k}">${String(v).replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`)}</dd>`)
      .join('');
    ctx.body = page('oops! something went wrong', `<h1>oops! something went wrong</h1><dl id="error">${rows}</dl>`);
  },
  // Plain http on 127.0.0.1: cookies are not `Secure` (koa sets that only for https) and SameSite=Lax works.
  cookies: { keys: [randomBytes(32).toString('hex')] },
  ttl: {
    AccessToken: 600,
    AuthorizationCode: 120,
    IdToken: 600,
    Interaction: 600,
    Session: 3600,
    Grant: 3600,
  },
};

const provider = new Provider(issuer, configuration);
// The stock development pages and this process are local; no proxy in front.
provider.proxy = false;

const server = provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
server.on('error', (err) => {
  console.error(`provider.mjs: ${err.message}`);
  process.exit(1);
});

const stop = () => {
  server.close();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
// Started by the test harness: exit when the parent goes away (its end of our stdin closes), even if it was
// killed before it could stop us.
if (process.env.OIDC_EXIT_ON_STDIN_EOF === '1') {
  process.stdin.on('end', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();
}
