import { api } from '../api';
import { errorBox, field, h, showError } from '../dom';

function credentialsForm(opts: {
  title: string;
  intro: string;
  submit: string;
  newPassword: boolean;
  onSubmit: (email: string, password: string) => Promise<void>;
}): HTMLElement {
  const email = h('input', { type: 'email', name: 'email', autocomplete: 'username', required: true });
  const password = h('input', {
    type: 'password',
    name: 'password',
    autocomplete: opts.newPassword ? 'new-password' : 'current-password',
    required: true,
    minlength: opts.newPassword ? 8 : null,
  });
  const error = errorBox();
  const button = h('button', { type: 'submit' }, opts.submit);
  const form = h(
    'form',
    { class: 'card narrow', novalidate: false },
    h('h1', {}, opts.title),
    h('p', { class: 'muted' }, opts.intro),
    error,
    field('Email', email),
    field('Password', password, opts.newPassword ? 'At least 8 characters.' : undefined),
    button,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    button.disabled = true;
    try {
      await opts.onSubmit(email.value, password.value);
    } catch (err) {
      showError(error, err);
      password.value = '';
      password.focus();
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

export function renderSignIn(main: HTMLElement, onSignedIn: () => Promise<void>): void {
  document.title = 'Sign in · telemetryd';
  const form = credentialsForm({
    title: 'Sign in',
    intro: 'Sign in to manage your devices, alerts and API keys.',
    submit: 'Sign in',
    newPassword: false,
    onSubmit: async (email, password) => {
      await api('POST', '/sign-in', { email, password });
      await onSignedIn();
    },
  });
  main.replaceChildren(form);
  (form.querySelector('input') as HTMLInputElement).focus();
}

export async function renderSetup(main: HTMLElement, onDone: () => Promise<void>): Promise<void> {
  document.title = 'First run · telemetryd';
  const token = new URLSearchParams(location.search).get('token') ?? '';
  const { valid } = await api<{ valid: boolean }>('GET', `/setup?token=${encodeURIComponent(token)}`);
  if (!valid) {
    main.replaceChildren(
      h(
        'div',
        { class: 'card narrow' },
        h('h1', {}, 'Setup link not valid'),
        h('p', {}, 'This setup link was already used, or an account exists. '),
        h('p', {}, h('a', { href: '/' }, 'Go to sign-in')),
      ),
    );
    return;
  }
  const form = credentialsForm({
    title: 'Create the first account',
    intro: 'This link works once. The account you create here owns the devices, alerts and API keys.',
    submit: 'Create account',
    newPassword: true,
    onSubmit: async (email, password) => {
      await api('POST', '/setup', { token, email, password });
      await onDone();
    },
  });
  main.replaceChildren(form);
  (form.querySelector('input') as HTMLInputElement).focus();
}
